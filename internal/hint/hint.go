// Package hint attaches a user-facing hint ("run: ALTER TABLE ...") to an
// error. The command line prints the error, then the hint on its own line.
package hint

import "errors"

// Error is an error with a hint saying how to fix it.
type Error struct {
	Err  error
	Text string
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Hint returns the hint text.
func (e *Error) Hint() string { return e.Text }

// Wrap returns err with a hint; a nil err stays nil.
func Wrap(err error, text string) error {
	if err == nil {
		return nil
	}
	return &Error{Err: err, Text: text}
}

// Of returns the first hint found in err's chain, or "".
func Of(err error) string {
	var h interface{ Hint() string }
	if errors.As(err, &h) {
		return h.Hint()
	}
	return ""
}
