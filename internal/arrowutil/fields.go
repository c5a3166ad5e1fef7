package arrowutil

import (
	"fmt"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
)

// FieldsChange says how the names and types of got differ from want's,
// or "".
func FieldsChange(want, got []arrow.Field) string {
	var parts []string
	for i := 0; i < max(len(want), len(got)); i++ {
		switch {
		case i >= len(got):
			parts = append(parts, "column "+want[i].Name+" is gone")
		case i >= len(want):
			parts = append(parts, "column "+got[i].Name+" was added")
		case want[i].Name != got[i].Name:
			parts = append(parts, fmt.Sprintf("column %d is %s, was %s", i+1, got[i].Name, want[i].Name))
		case !arrow.TypeEqual(want[i].Type, got[i].Type):
			parts = append(parts, fmt.Sprintf("column %s is %s, was %s", got[i].Name, got[i].Type, want[i].Type))
		}
	}
	return strings.Join(parts, ", ")
}
