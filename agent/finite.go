package agent

import (
	"fmt"
	"math"
)

// JSON has no NaN or infinities, but a msgpack caller's numbers can be
// either. A turn's record, its events and its transcript are JSON (or must
// be answerable as JSON), so such a number must not get that far: a
// function's result has it replaced ([FiniteNumbers]), a message holding
// one is invalid ([Message.Validate]).

// Names of the non-finite numbers in JSON text, as JavaScript prints them.
const (
	NaNText    = "NaN"
	InfText    = "Infinity"
	NegInfText = "-Infinity"
)

// FiniteNumbers returns v with every NaN and infinity in it replaced by
// the strings [NaNText], [InfText] or [NegInfText], and whether it
// replaced any. Maps and slices (map[string]any, map[any]any, []any, as
// the codecs decode them) are changed in place; other values are left as
// they are.
func FiniteNumbers(v any) (any, bool) {
	switch x := v.(type) {
	case float64:
		if s := nonFiniteText(x); s != "" {
			return s, true
		}
	case float32:
		if s := nonFiniteText(float64(x)); s != "" {
			return s, true
		}
	case map[string]any:
		changed := false
		for k, e := range x {
			if n, ok := FiniteNumbers(e); ok {
				x[k], changed = n, true
			}
		}
		return x, changed
	case map[any]any:
		changed := false
		for k, e := range x {
			if n, ok := FiniteNumbers(e); ok {
				x[k], changed = n, true
			}
		}
		return x, changed
	case []any:
		changed := false
		for i, e := range x {
			if n, ok := FiniteNumbers(e); ok {
				x[i], changed = n, true
			}
		}
		return x, changed
	}
	return v, false
}

// Finite returns r with the NaN and infinities of its details and of its
// blocks' arguments replaced ([FiniteNumbers]), changing r's maps in place,
// and whether it replaced any.
func (r FunctionResult) Finite() (FunctionResult, bool) {
	var changed bool
	r.Details, changed = FiniteNumbers(r.Details)
	for i := range r.Content {
		if _, ok := FiniteNumbers(r.Content[i].Arguments); ok {
			changed = true
		}
	}
	return r, changed
}

func nonFiniteText(f float64) string {
	switch {
	case math.IsNaN(f):
		return NaNText
	case math.IsInf(f, 1):
		return InfText
	case math.IsInf(f, -1):
		return NegInfText
	}
	return ""
}

// NonFinite names the first NaN or infinity in v (maps, slices and
// numbers, as the codecs decode them): [NaNText], [InfText] or
// [NegInfText]; "" when v has none.
func NonFinite(v any) string {
	switch x := v.(type) {
	case float64:
		return nonFiniteText(x)
	case float32:
		return nonFiniteText(float64(x))
	case map[string]any:
		for _, e := range x {
			if s := NonFinite(e); s != "" {
				return s
			}
		}
	case map[any]any:
		for _, e := range x {
			if s := NonFinite(e); s != "" {
				return s
			}
		}
	case []any:
		for _, e := range x {
			if s := NonFinite(e); s != "" {
				return s
			}
		}
	}
	return ""
}

// checkFinite is an error naming the first NaN or infinity in v.
func checkFinite(what string, v any) error {
	if s := NonFinite(v); s != "" {
		return fmt.Errorf("%w: %s holds %s, which JSON cannot carry", ErrInvalidMessage, what, s)
	}
	return nil
}
