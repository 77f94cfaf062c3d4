package redact

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Redacted replaces a secret.
const Redacted = "[redacted]"

// Elided replaces a list or object nested deeper than the max depth.
const Elided = "[…]"

// A Redactor redacts with a fixed set of options. It is immutable and safe
// for concurrent use; build it once with [New] when the options are
// configuration, so a bad one fails at startup.
type Redactor struct {
	o options
}

// std is the Redactor of the package functions called without options.
var std = &Redactor{o: defaultOptions()}

// New returns a Redactor with opts applied over the defaults, or an error
// wrapping [ErrInvalidOption] naming every invalid option.
func New(opts ...Option) (*Redactor, error) {
	o := defaultOptions()
	var errs []error
	for _, opt := range opts {
		if opt == nil {
			errs = append(errs, fmt.Errorf("%w: nil option", ErrInvalidOption))
			continue
		}
		if err := opt(&o); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Redactor{o: o}, nil
}

// lenient builds the Redactor of a package function call: invalid options
// are ignored (each one leaves the options as they were, but for the valid
// keys of WithExtraKeys).
func lenient(opts []Option) *Redactor {
	if len(opts) == 0 {
		return std
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt != nil {
			_ = opt(&o)
		}
	}
	return &Redactor{o: o}
}

// Value returns a deep copy of v with every secret replaced by [Redacted]
// (see the package documentation for what is a secret). v is what JSON or
// msgpack decoding yields — map[string]any, []any, map[any]any, string,
// float64, json.Number, integers, bool, nil — or any other Go value, which
// is converted first (see the package documentation). Lists and objects
// nested deeper than the max depth become [Elided]; nothing else is
// shortened. v is never modified.
func Value(v any, opts ...Option) any { return lenient(opts).Value(v) }

// Value is [Value] with r's options.
func (r *Redactor) Value(v any) any { return r.value(v, 0) }

// value copies v, which sits inside level lists or objects.
func (r *Redactor) value(v any, level int) any {
	switch x := v.(type) {
	case nil, bool, float64, float32, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return x
	case string:
		return r.redactString(x)
	case json.Number:
		if isNumber(string(x)) {
			return x
		}
		return r.redactString(string(x))
	case map[string]any:
		if x == nil {
			return x
		}
		if level >= r.o.maxDepth {
			return Elided
		}
		return r.copyMap(r.entries(stringKeyed(x)), level)
	case map[any]any:
		if x == nil {
			return map[string]any(nil)
		}
		if level >= r.o.maxDepth {
			return Elided
		}
		return r.copyMap(r.entries(anyKeyed(x)), level)
	case []any:
		if x == nil {
			return x
		}
		if level >= r.o.maxDepth {
			return Elided
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = r.value(e, level+1)
		}
		return out
	}
	return r.value(convert(v), level)
}

// entry is one entry of a map being copied: its key as a string (isString
// is false when it was printed from a non-string key), the key of the copy,
// and the value.
type entry struct {
	key, out string
	isString bool
	value    any
}

func stringKeyed(m map[string]any) []entry {
	es := make([]entry, 0, len(m))
	for k, v := range m {
		es = append(es, entry{key: k, isString: true, value: v})
	}
	return es
}

func anyKeyed(m map[any]any) []entry {
	es := make([]entry, 0, len(m))
	for k, v := range m {
		ks, ok := k.(string)
		if !ok {
			ks = keyString(k)
		}
		es = append(es, entry{key: ks, isString: ok, value: v})
	}
	return es
}

// entries sets the key of the copy of each entry and sorts them by it.
// A key that holds a credential is redacted like a string. Entries whose
// key changed (redacted, or printed from a non-string key) are placed after
// the others, in key order, so that a collision — two keys redacted to the
// same text, 1 and "1" — keeps both: the later one gets a " (2)", " (3)"…
// suffix. Value and Excerpt share this, so they agree.
func (r *Redactor) entries(es []entry) []entry {
	taken := make(map[string]struct{}, len(es))
	renamed := 0
	for i := range es {
		es[i].out = r.redactString(es[i].key)
		if es[i].out == es[i].key && es[i].isString {
			taken[es[i].out] = struct{}{}
		} else {
			renamed++
		}
	}
	if renamed > 0 {
		// Unchanged keys first, then the renamed ones by key.
		slices.SortFunc(es, func(a, b entry) int {
			ra, rb := a.out != a.key || !a.isString, b.out != b.key || !b.isString
			switch {
			case ra != rb && ra:
				return 1
			case ra != rb:
				return -1
			}
			return strings.Compare(a.key, b.key)
		})
		for i := len(es) - renamed; i < len(es); i++ {
			base := es[i].out
			for n := 2; ; n++ {
				if _, dup := taken[es[i].out]; !dup {
					break
				}
				es[i].out = base + " (" + strconv.Itoa(n) + ")"
			}
			taken[es[i].out] = struct{}{}
		}
	}
	slices.SortFunc(es, func(a, b entry) int { return strings.Compare(a.out, b.out) })
	return es
}

// copyMap is the redacted copy of a map's entries.
func (r *Redactor) copyMap(es []entry, level int) map[string]any {
	out := make(map[string]any, len(es))
	pair := r.pairName(es)
	for _, e := range es {
		out[e.out] = r.entryValue(pairKey(e, pair), e.value, level)
	}
	return out
}

// pairNames are the keys that hold the name of a name/value pair.
var pairNames = []string{"name", "key", "header"}

// pairName returns, for an object that is a name/value pair, the secret
// its name names: a "value" entry beside a "name", "key" or "header" entry
// (any case) whose string [Redactor.IsSecretKey] accepts. Kubernetes env
// vars ({"name":"DB_PASSWORD","value":"x"}) and the header lists of HAR
// files and HTTP tools ({"name":"X-Api-Key","value":"x"}) have this shape;
// their value is judged as if it were under that name. Else "".
func (r *Redactor) pairName(es []entry) string {
	hasValue := false
	name := ""
	for _, e := range es {
		if !e.isString {
			continue
		}
		if strings.EqualFold(e.key, "value") {
			hasValue = true
			continue
		}
		for _, pn := range pairNames {
			if n, ok := e.value.(string); ok && name == "" && strings.EqualFold(e.key, pn) && r.IsSecretKey(n) {
				name = n
			}
		}
	}
	if !hasValue {
		return ""
	}
	return name
}

// pairKey is the key e's value is judged under: the pair's name for the
// "value" of a name/value pair that names a secret, else e's own key.
func pairKey(e entry, pair string) string {
	if pair != "" && e.isString && strings.EqualFold(e.key, "value") {
		return pair
	}
	return e.key
}

// entryValue is the copy of the value e under the key k.
func (r *Redactor) entryValue(k string, e any, level int) any {
	if r.IsSecretKey(k) {
		return secretValue(k, e)
	}
	return r.value(e, level+1)
}

// secretValue is what stays of e under the secret key k: null and booleans
// carry no credential; a number is a count under a count key ("max_tokens")
// and a secret otherwise ("pin"); anything else is a secret.
func secretValue(k string, e any) any {
	switch x := e.(type) {
	case nil, bool:
		return x
	case float64, float32, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		if isCountKey(k) {
			return x
		}
	case json.Number:
		if isCountKey(k) && isNumber(string(x)) {
			return x
		}
	}
	return Redacted
}

// keyString is the map key of a non-string key (msgpack may decode
// map[any]any): a string as is, anything else as fmt prints it.
func keyString(k any) string {
	if s, ok := k.(string); ok {
		return s
	}
	switch reflect.ValueOf(k).Kind() {
	case reflect.Map, reflect.Slice, reflect.Struct, reflect.Pointer, reflect.Array, reflect.Interface:
		return unsupported(k) // fmt could recurse forever on a cycle
	}
	return fmt.Sprint(k)
}

// convert turns a Go value that is not one of the JSON-decoded shapes into
// one: json.RawMessage is decoded; []byte and string kinds become strings;
// an error becomes its message (unless it marshals itself); numbers and
// bools of named types become their basic value; structs, maps, slices,
// arrays and pointers go through encoding/json (so struct fields are
// matched by their json names); chans, funcs and complex numbers are
// printed with fmt. A value encoding/json cannot take (a cycle, a chan
// field, a panicking MarshalJSON) becomes "[unsupported <type>]".
func convert(v any) any {
	switch x := v.(type) {
	case json.RawMessage:
		d := json.NewDecoder(bytes.NewReader(x))
		d.UseNumber()
		var out any
		// A tail is text too (Decoder.More reports false before a '}'
		// or ']', so it does not see `{...}]tail`).
		if err := d.Decode(&out); err != nil || len(bytes.TrimSpace(x[d.InputOffset():])) > 0 {
			return string(x)
		}
		return out
	case []byte:
		return string(x)
	case json.Marshaler:
		return viaJSON(v)
	case error:
		return errorText(x)
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Bool:
		return rv.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return rv.Uint()
	case reflect.Float32, reflect.Float64:
		return rv.Float()
	case reflect.String:
		return rv.String()
	case reflect.Chan, reflect.Func, reflect.UnsafePointer, reflect.Complex64, reflect.Complex128:
		return fmt.Sprint(v)
	case reflect.Slice:
		if rv.Type().Elem().Kind() == reflect.Uint8 { // a named []byte
			return string(rv.Bytes())
		}
	}
	return viaJSON(v)
}

// viaJSON round-trips v through encoding/json.
func viaJSON(v any) (out any) {
	defer func() {
		if recover() != nil {
			out = unsupported(v)
		}
	}()
	b, err := json.Marshal(v)
	if err != nil {
		return unsupported(v)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&out); err != nil {
		return unsupported(v)
	}
	return out
}

func errorText(err error) (s string) {
	defer func() {
		if recover() != nil {
			s = unsupported(err)
		}
	}()
	return err.Error()
}

func unsupported(v any) string {
	return "[unsupported " + reflect.TypeOf(v).String() + "]"
}

// isNumber reports whether s is a JSON number (encoding/json's rule).
func isNumber(s string) bool {
	if s == "" {
		return false
	}
	if s[0] == '-' {
		s = s[1:]
		if s == "" {
			return false
		}
	}
	switch {
	case s[0] == '0':
		s = s[1:]
	case '1' <= s[0] && s[0] <= '9':
		s = s[1:]
		for len(s) > 0 && isDigit(s[0]) {
			s = s[1:]
		}
	default:
		return false
	}
	if len(s) >= 2 && s[0] == '.' && isDigit(s[1]) {
		s = s[2:]
		for len(s) > 0 && isDigit(s[0]) {
			s = s[1:]
		}
	}
	if len(s) >= 2 && (s[0] == 'e' || s[0] == 'E') {
		s = s[1:]
		if s[0] == '+' || s[0] == '-' {
			s = s[1:]
			if s == "" {
				return false
			}
		}
		for len(s) > 0 && isDigit(s[0]) {
			s = s[1:]
		}
	}
	return s == ""
}
