package servers

import "context"

// TB is the part of testing.TB that CreateDatabase needs. testing.TB
// satisfies it; servers does not import "testing", so that a program (rtrctl
// bench) may launch servers without linking the test framework.
type TB interface {
	Helper()
	Context() context.Context
	Cleanup(func())
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}
