package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// emptyArgs is what absent (nil) args become: the empty object. It is never
// written to.
var emptyArgs = map[string]any{}

// inspectArgs bounds args (size, depth), refuses objects with keys that
// differ only in case, and returns the canonical form every rule sees:
// objects are map[string]any, lists []any, strings string ([]byte too),
// numbers int64 when integral in range, uint64 when integral above it, and
// float64 otherwise, so that one value compares the same whichever codec
// carried it. A value of another Go type (a struct, a typed map) is taken
// through encoding/json first.
func inspectArgs(args any, maxBytes, maxDepth int) (any, *Decision) {
	if args == nil {
		return emptyArgs, nil
	}
	in := inspector{limit: maxBytes, budget: maxBytes, maxDepth: maxDepth}
	root, _ := in.walk(args, 0)
	if in.unsupported {
		b, err := json.Marshal(args)
		if err != nil {
			return nil, &Decision{Decision: Deny, RuleID: RuleInvalidArgs, Reason: "args are not a JSON value: " + err.Error()}
		}
		if len(b) > maxBytes {
			return nil, tooLarge(maxBytes)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, &Decision{Decision: Deny, RuleID: RuleInvalidArgs, Reason: "args are not a JSON value: " + err.Error()}
		}
		in = inspector{limit: maxBytes, budget: maxBytes, maxDepth: maxDepth}
		root, _ = in.walk(v, 0)
		if in.unsupported {
			return nil, &Decision{Decision: Deny, RuleID: RuleInvalidArgs, Reason: "args are not a JSON value"}
		}
	}
	if in.reject != nil {
		return nil, in.reject
	}
	if root == nil {
		return emptyArgs, nil
	}
	return root, nil
}

func tooLarge(maxBytes int) *Decision {
	return &Decision{Decision: Deny, RuleID: RuleArgsTooLarge, Reason: fmt.Sprintf("args exceed %d bytes of JSON; the gate does not allow what it will not inspect", maxBytes)}
}

type inspector struct {
	limit       int
	budget      int
	maxDepth    int
	reject      *Decision
	unsupported bool
}

func (in *inspector) spend(n int) bool {
	in.budget -= n
	if in.budget < 0 {
		if in.reject == nil {
			in.reject = tooLarge(in.limit)
		}
		return false
	}
	return true
}

func (in *inspector) stopped() bool { return in.reject != nil || in.unsupported }

// walk returns the canonical form of v and whether it differs from v. It
// stops at the first rejection.
func (in *inspector) walk(v any, depth int) (any, bool) {
	if in.stopped() {
		return nil, false
	}
	switch x := v.(type) {
	case nil:
		in.spend(4)
		return nil, false
	case bool:
		in.spend(5)
		return x, false
	case string:
		in.spend(len(x) + 2)
		return x, false
	case []byte:
		// msgpack bin: a handler decoding into a string field reads it as
		// text, so the policy does too.
		in.spend(len(x) + 2)
		return string(x), true
	case float64:
		in.spend(8)
		return canonFloat(x)
	case float32:
		in.spend(8)
		c, _ := canonFloat(float64(x))
		return c, true
	case int64:
		in.spend(8)
		return x, false
	case int:
		in.spend(8)
		return int64(x), true
	case int8:
		in.spend(4)
		return int64(x), true
	case int16:
		in.spend(6)
		return int64(x), true
	case int32:
		in.spend(8)
		return int64(x), true
	case uint64:
		in.spend(8)
		if x <= math.MaxInt64 {
			return int64(x), true
		}
		return x, false
	case uint:
		in.spend(8)
		return canonUint(uint64(x)), true
	case uint8:
		in.spend(4)
		return int64(x), true
	case uint16:
		in.spend(6)
		return int64(x), true
	case uint32:
		in.spend(8)
		return int64(x), true
	case json.Number:
		in.spend(len(x))
		n, ok := canonNumber(string(x))
		if !ok {
			in.reject = &Decision{Decision: Deny, RuleID: RuleInvalidArgs, Reason: fmt.Sprintf("args hold an invalid number %q", truncate(string(x), 40))}
			return nil, false
		}
		return n, true
	case map[string]any:
		return in.walkMap(x, depth)
	case []any:
		return in.walkList(x, depth)
	default:
		in.unsupported = true
		return nil, false
	}
}

func (in *inspector) deeper(depth int) bool {
	if depth >= in.maxDepth {
		in.reject = &Decision{Decision: Deny, RuleID: RuleArgsTooDeep, Reason: fmt.Sprintf("args nest deeper than %d levels", in.maxDepth)}
		return false
	}
	return true
}

// walkMap visits the keys in sorted order, so that which limit a call
// breaks first, and the reason given, never depend on map iteration.
func (in *inspector) walkMap(m map[string]any, depth int) (any, bool) {
	if !in.deeper(depth) || !in.spend(2) {
		return nil, false
	}
	var buf [16]string
	keys := buf[:0]
	if len(m) > len(buf) {
		keys = make([]string, 0, len(m))
	}
	for k := range m {
		if !in.spend(len(k) + 4) {
			return nil, false
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if a, b, ok := foldCollision(keys); ok {
		in.reject = &Decision{Decision: Deny, RuleID: RuleAmbiguousArgs, Reason: fmt.Sprintf("args keys %q and %q differ only in case; a handler could read either", truncate(a, 40), truncate(b, 40))}
		return nil, false
	}
	var out map[string]any
	for _, k := range keys {
		v := m[k]
		c, changed := in.walk(v, depth+1)
		if in.stopped() {
			return nil, false
		}
		if changed && out == nil {
			out = make(map[string]any, len(m))
			for k2, v2 := range m {
				out[k2] = v2
			}
		}
		if out != nil {
			out[k] = c
		}
	}
	if out != nil {
		return out, true
	}
	return m, false
}

func (in *inspector) walkList(l []any, depth int) (any, bool) {
	if !in.deeper(depth) || !in.spend(2) {
		return nil, false
	}
	var out []any
	for i, v := range l {
		if !in.spend(1) {
			return nil, false
		}
		c, changed := in.walk(v, depth+1)
		if in.stopped() {
			return nil, false
		}
		if changed && out == nil {
			out = make([]any, len(l))
			copy(out, l)
		}
		if out != nil {
			out[i] = c
		}
	}
	if out != nil {
		return out, true
	}
	return l, false
}

// Canonical numbers: int64 for integral values in its range, uint64 for
// integral values above it, float64 for the rest (fractions, huge values,
// NaN, ±Inf). Two canonical numbers are equal exactly when their interface
// values are ==.
const (
	two63 = 9223372036854775808.0  // 2^63
	two64 = 18446744073709551616.0 // 2^64
)

func canonFloat(f float64) (any, bool) {
	if f == math.Trunc(f) {
		switch {
		case f >= -two63 && f < two63:
			return int64(f), true
		case f >= two63 && f < two64:
			return uint64(f), true
		}
	}
	return f, false
}

func canonUint(u uint64) any {
	if u <= math.MaxInt64 {
		return int64(u)
	}
	return u
}

func canonNumber(s string) (any, bool) {
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i, true
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return canonUint(u), true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !isRangeErr(err) {
		return nil, false
	}
	c, _ := canonFloat(f)
	return c, true
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// foldCollision finds the first two of the sorted keys that are equal under
// Unicode simple case folding (strings.EqualFold: "Path" and "path", "k"
// and the Kelvin sign).
func foldCollision(keys []string) (string, string, bool) {
	if len(keys) < 2 {
		return "", "", false
	}
	if len(keys) <= 16 {
		for i, a := range keys {
			for _, b := range keys[i+1:] {
				if strings.EqualFold(a, b) {
					return a, b, true
				}
			}
		}
		return "", "", false
	}
	seen := make(map[string]string, len(keys))
	for _, k := range keys {
		f := foldKey(k)
		if prev, ok := seen[f]; ok {
			return prev, k, true
		}
		seen[f] = k
	}
	return "", "", false
}

// foldKey maps s to a representative of its case-folding class: each rune
// becomes the smallest rune of its simple folding orbit, so two strings
// have the same key exactly when strings.EqualFold holds.
func foldKey(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return strings.ToUpper(s)
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

// kind is the JSON type of a canonical value.
type kind uint8

const (
	kindMissing kind = iota
	kindNull
	kindString
	kindNumber
	kindBool
	kindObject
	kindList
)

func (k kind) String() string {
	return [...]string{"missing", "null", "a string", "a number", "a bool", "an object", "a list"}[k]
}

func kindOf(v any) kind {
	switch v.(type) {
	case nil:
		return kindNull
	case string:
		return kindString
	case int64, uint64, float64:
		return kindNumber
	case bool:
		return kindBool
	case map[string]any:
		return kindObject
	case []any:
		return kindList
	}
	return kindNull
}

// lookup follows path from root. Strict lookups (allow rules) take the key
// as written; lenient ones (deny and needs_approval rules) also take a key
// that differs only in case, since a handler may. found is false when a
// segment is missing or an intermediate value is null; mismatch names the
// kind of an intermediate value that is not an object.
func lookup(root any, path []string, lenient bool) (v any, found bool, mismatch kind) {
	cur := root
	for _, seg := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			if cur == nil {
				return nil, false, 0
			}
			return nil, false, kindOf(cur)
		}
		next, ok := m[seg]
		if !ok && lenient {
			for k, v := range m {
				if strings.EqualFold(k, seg) {
					next, ok = v, true
					break
				}
			}
		}
		if !ok {
			return nil, false, 0
		}
		cur = next
	}
	return cur, true, 0
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
