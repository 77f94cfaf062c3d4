package wire

import (
	"encoding"
	"encoding/binary"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/tagparser/v2"
)

// Why this file: vmihailenco/msgpack v5.4.1 fills a struct from a msgpack
// array by position, and from an empty array as the zero value, at any
// depth. JSON refuses an array where an object is wanted; a msgpack
// caller's {"work":[]} or {"messages":[[...]]} must not read as
// {"work":{}} or as messages filled by position. And where a Go map is
// wanted, the library reads past an ext value's header and takes the ext's
// payload for the map, unbounded by the ext's length: bytes checkMsgpack
// saw as opaque then declare lengths it never checked (an 8-byte request
// made a map[string]any of 2^20 entries, 80 MB; 2^32 would exhaust memory).
// The library has no decoder hook for either, so [checkObjects] walks the
// bytes, guided by the target's type, before the library decodes them. It
// follows the library's own reading: field names as its struct cache finds
// them (msgpack tag, else the json tag, inlined embedded structs, aliases),
// types with a decoder of their own and interface values left alone, and a
// struct tagged `msgpack:",as_array"` still read from an array.

// structTag is the tag the codecs fall back to when a field has no
// msgpack tag.
const structTag = "json"

// objShape is what to look at in a msgpack value decoded into one Go
// type; a nil *objShape means nothing: no struct or map is reachable from
// the type except through a decoder of its own or an interface.
type objShape struct {
	kind objKind
	typ  reflect.Type // the struct or map type, for the error
	// asArray: the struct is tagged as_array, so an array is its own form.
	asArray bool
	// look is the struct's fields that need looking at, by wire name: a
	// list while short (a few byte compares beat hashing every key), a
	// map beyond.
	look    []objField
	lookMap map[string]*objShape
	// list is every field in the library's positional order (as_array).
	list []objField
	elem *objShape // list and map elements
	key  *objShape // map keys
	// leaf: nothing inside needs looking at (a struct without such
	// fields, a map[string]any), only the value's first byte.
	leaf bool
}

type objKind uint8

const (
	objStruct objKind = iota + 1
	objList           // a slice or an array
	objMap
)

type objField struct {
	name  string
	shape *objShape
}

var objShapes sync.Map // reflect.Type → *objShape

var (
	customDecoderType     = reflect.TypeFor[msgpack.CustomDecoder]()
	unmarshalerType       = reflect.TypeFor[msgpack.Unmarshaler]()
	binaryUnmarshalerType = reflect.TypeFor[encoding.BinaryUnmarshaler]()
	textUnmarshalerType   = reflect.TypeFor[encoding.TextUnmarshaler]()
	customEncoderType     = reflect.TypeFor[msgpack.CustomEncoder]()
	marshalerType         = reflect.TypeFor[msgpack.Marshaler]()
	binaryMarshalerType   = reflect.TypeFor[encoding.BinaryMarshaler]()
	textMarshalerType     = reflect.TypeFor[encoding.TextMarshaler]()
)

// shapeOf is the cached shape of what the library decodes for a
// Decode(v) with v of type t: the value t points to.
func shapeOf(t reflect.Type) *objShape {
	if t == nil || t.Kind() != reflect.Pointer {
		return nil
	}
	if s, ok := objShapes.Load(t); ok {
		return s.(*objShape)
	}
	s := (&shapeBuilder{memo: map[reflect.Type]*objShape{}}).build(t.Elem())
	actual, _ := objShapes.LoadOrStore(t, s)
	return actual.(*objShape)
}

// ownDecoder reports whether the library decodes t with a decoder of the
// type's own (its _getDecoder order), which keeps whatever it does with
// an array. Types registered with msgpack.Register are not visible here;
// time.Time, the one the library registers, is a BinaryUnmarshaler.
func ownDecoder(t reflect.Type) bool {
	implements := func(t reflect.Type) bool {
		return t.Implements(customDecoderType) || t.Implements(unmarshalerType) ||
			t.Implements(binaryUnmarshalerType) || t.Implements(textUnmarshalerType)
	}
	return implements(t) || t.Kind() != reflect.Pointer && implements(reflect.PointerTo(t))
}

// ownEncoder is ownDecoder's encoding side; the library inlines an
// embedded struct only when it has neither.
func ownEncoder(t reflect.Type) bool {
	implements := func(t reflect.Type) bool {
		return t.Implements(customEncoderType) || t.Implements(marshalerType) ||
			t.Implements(binaryMarshalerType) || t.Implements(textMarshalerType)
	}
	return implements(t) || t.Kind() != reflect.Pointer && implements(reflect.PointerTo(t))
}

// needsLook reports whether a struct or map the library fills itself is
// reachable from t through pointers, slices and arrays.
func needsLook(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] || ownDecoder(t) {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return needsLook(t.Elem(), seen)
	}
	return false
}

type shapeBuilder struct {
	memo map[reflect.Type]*objShape
}

func (b *shapeBuilder) build(t reflect.Type) *objShape {
	if s, ok := b.memo[t]; ok {
		return s
	}
	if !needsLook(t, map[reflect.Type]bool{}) {
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		// nil reads as nil; anything else as what t points to.
		s := b.build(t.Elem())
		b.memo[t] = s
		return s
	case reflect.Slice, reflect.Array:
		s := &objShape{kind: objList}
		b.memo[t] = s
		s.elem = b.build(t.Elem())
		return s
	case reflect.Map:
		s := &objShape{kind: objMap, typ: t}
		b.memo[t] = s
		s.key = b.build(t.Key())
		s.elem = b.build(t.Elem())
		s.leaf = s.key == nil && s.elem == nil
		return s
	}
	s := &objShape{kind: objStruct, typ: t}
	b.memo[t] = s
	fs := msgpackFields(t, nil)
	s.asArray = fs.asArray
	for name, ft := range fs.byName {
		if fsh := b.build(ft); fsh != nil {
			s.look = append(s.look, objField{name: name, shape: fsh})
		}
	}
	if len(s.look) > maxLookList {
		s.lookMap = make(map[string]*objShape, len(s.look))
		for _, f := range s.look {
			s.lookMap[f.name] = f.shape
		}
		s.look = nil
	}
	s.leaf = len(s.look) == 0 && s.lookMap == nil && !s.asArray
	if s.asArray {
		for _, f := range fs.list {
			s.list = append(s.list, objField{name: f.name, shape: b.build(f.typ)})
		}
	}
	return s
}

// fieldSet is a struct's fields as the library's getFields finds them.
type fieldSet struct {
	byName  map[string]reflect.Type
	list    []namedType
	asArray bool
}

type namedType struct {
	name string
	typ  reflect.Type
}

func (fs *fieldSet) add(name string, t reflect.Type) {
	fs.byName[name] = t
	fs.list = append(fs.list, namedType{name, t})
}

// msgpackFields follows msgpack v5.4.1's getFields (types.go) with the
// codecs' fallback tag: what name decodes into which field. outer are
// the structs t is being inlined into: a struct that embeds itself through
// a pointer is not inlined again (the library recurses without end).
func msgpackFields(t reflect.Type, outer []reflect.Type) fieldSet {
	fs := fieldSet{byName: map[string]reflect.Type{}}
	outer = append(outer, t)
	for i := range t.NumField() {
		f := t.Field(i)
		tagStr := f.Tag.Get("msgpack")
		if tagStr == "" {
			tagStr = f.Tag.Get(structTag)
		}
		tag := tagparser.Parse(tagStr)
		if tag.Name == "-" {
			continue
		}
		if f.Name == "_msgpack" {
			fs.asArray = tag.HasOption("as_array") || tag.HasOption("asArray")
		}
		if f.PkgPath != "" && !f.Anonymous {
			continue
		}
		name := tag.Name
		if name == "" {
			name = f.Name
		}
		if f.Anonymous && !tag.HasOption("noinline") {
			var inline bool
			if tag.HasOption("inline") {
				inline = true
				if et := f.Type; et.Kind() == reflect.Struct && !slices.Contains(outer, et) {
					for _, in := range msgpackFields(et, outer).list {
						if _, shadowed := fs.byName[in.name]; !shadowed {
							fs.add(in.name, in.typ)
						}
					}
				}
			} else {
				inline = shouldInline(&fs, f.Type, outer)
			}
			if inline {
				fs.byName[name] = f.Type
				continue
			}
		}
		fs.add(name, f.Type)
		if alias, ok := tag.Options["alias"]; ok {
			fs.byName[alias] = f.Type
		}
	}
	return fs
}

// shouldInline is the library's: an embedded struct (or pointer to one)
// with the default coding is inlined unless a field of it is shadowed.
func shouldInline(fs *fieldSet, t reflect.Type, outer []reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || ownDecoder(t) || ownEncoder(t) || slices.Contains(outer, t) {
		return false
	}
	inner := msgpackFields(t, outer).list
	for _, in := range inner {
		if _, shadowed := fs.byName[in.name]; shadowed {
			return false
		}
	}
	for _, in := range inner {
		fs.add(in.name, in.typ)
	}
	return true
}

// checkObjects refuses data where the library would fill a struct of
// v's type from an array, or read a map from inside an ext value. data has
// passed checkMsgpack.
func checkObjects(data []byte, v any) error {
	s := shapeOf(reflect.TypeOf(v))
	if s == nil {
		return nil
	}
	if s.leaf && len(data) > 0 && !(s.kind == objStruct && isArray(data[0]) || s.kind == objMap && isExt(data[0])) {
		return nil // nothing but the first byte matters, and it is fine
	}
	w := objWalker{data: data}
	err := w.value(s, 0)
	if oe, ok := err.(*objError); ok {
		return oe.finish()
	}
	return err
}

// objError is a value of the wrong kind where a map is wanted; path is
// built while the walk unwinds, innermost segment first.
type objError struct {
	found string // "an array", "an ext value"
	typ   reflect.Type
	path  []string
	msg   string
}

func (e *objError) Error() string { return e.msg }

func (e *objError) finish() error {
	if len(e.path) == 0 {
		e.msg = fmt.Sprintf("%s does not decode into %s, which wants a map", e.found, e.typ)
		return e
	}
	var b strings.Builder
	for i := len(e.path) - 1; i >= 0; i-- {
		seg := e.path[i]
		if i == len(e.path)-1 {
			seg = strings.TrimPrefix(seg, ".")
		}
		b.WriteString(seg)
	}
	e.msg = fmt.Sprintf("%s at %s does not decode into %s, which wants a map", e.found, b.String(), e.typ)
	return e
}

func (e *objError) in(seg string) error {
	e.path = append(e.path, seg)
	return e
}

// objWalker reads data as the library will, one value at a time.
type objWalker struct {
	data []byte
	p    int
}

// maxKeyInPath bounds a map key quoted in an error's path.
const maxKeyInPath = 64

func (w *objWalker) value(s *objShape, depth int) error {
	if s == nil {
		return w.skip()
	}
	if depth >= maxMsgpackDepth {
		return fmt.Errorf("%w: nested deeper than %d", errMsgpackShape, maxMsgpackDepth)
	}
	if w.p >= len(w.data) {
		return w.truncated()
	}
	c := w.data[w.p]
	if s.kind == objMap && isExt(c) {
		// The library's DecodeMapLen would read past the ext's header
		// and take its payload, and what follows, for the map.
		return &objError{found: "an ext value", typ: s.typ}
	}
	if isArray(c) {
		if s.kind == objStruct && !s.asArray {
			return &objError{found: "an array", typ: s.typ}
		}
		n, err := w.length()
		if err != nil {
			return err
		}
		switch {
		case s.kind == objList:
			for i := range n {
				if err := w.value(s.elem, depth+1); err != nil {
					return wrapPath(err, func() string { return "[" + strconv.Itoa(i) + "]" })
				}
			}
			return nil
		case s.kind == objStruct && n == len(s.list):
			for _, f := range s.list {
				if err := w.value(f.shape, depth+1); err != nil {
					return wrapPath(err, func() string { return "." + f.name })
				}
			}
			return nil
		}
		// The library refuses the rest (a map from an array; an as_array
		// struct with another count of fields).
		return w.skipN(uint64(n))
	}
	if !isMap(c) || s.kind == objList || s.leaf {
		return w.skip()
	}
	n, err := w.length()
	if err != nil {
		return err
	}
	for i := range n {
		keyAt := w.p
		if s.kind == objMap {
			if err := w.value(s.key, depth+1); err != nil {
				return wrapPath(err, func() string { return "[key " + strconv.Itoa(i) + "]" })
			}
			if err := w.value(s.elem, depth+1); err != nil {
				return wrapPath(err, func() string { return w.keyText(keyAt, i) })
			}
			continue
		}
		name, ok, err := w.str()
		if err != nil {
			return err
		}
		var fs *objShape
		if ok {
			fs = s.field(name)
		}
		if err := w.value(fs, depth+1); err != nil {
			return wrapPath(err, func() string { return "." + string(name) })
		}
	}
	return nil
}

// maxLookList is the most fields a struct's shape keeps in a list.
const maxLookList = 8

// field is the shape of the field name decodes into, nil if none.
func (s *objShape) field(name []byte) *objShape {
	if s.lookMap != nil {
		return s.lookMap[string(name)]
	}
	for i := range s.look {
		if s.look[i].name == string(name) {
			return s.look[i].shape
		}
	}
	return nil
}

func wrapPath(err error, seg func() string) error {
	if oe, ok := err.(*objError); ok {
		return oe.in(seg())
	}
	return err
}

// keyText renders the map key at p for an error's path.
func (w *objWalker) keyText(p, i int) string {
	kw := objWalker{data: w.data, p: p}
	if b, ok, err := kw.str(); err == nil && ok {
		if len(b) > maxKeyInPath {
			return "[" + strconv.Quote(string(b[:maxKeyInPath])+"…") + "]"
		}
		return "[" + strconv.Quote(string(b)) + "]"
	}
	return "[key " + strconv.Itoa(i) + "]"
}

func (w *objWalker) truncated() error {
	return fmt.Errorf("%w: truncated at offset %d", errMsgpackShape, w.p)
}

// length reads an array or map header and returns its count.
func (w *objWalker) length() (int, error) {
	c := w.data[w.p]
	var size int
	switch c {
	case 0xdc, 0xde:
		size = 2
	case 0xdd, 0xdf:
		size = 4
	default:
		w.p++
		return int(c & 0x0f), nil
	}
	if len(w.data)-w.p < 1+size {
		return 0, w.truncated()
	}
	n := w.uint(w.p+1, size)
	w.p += 1 + size
	// Every element takes at least one byte.
	if n > uint64(len(w.data)-w.p) {
		return 0, w.truncated()
	}
	return int(n), nil
}

func (w *objWalker) uint(at, size int) uint64 {
	switch size {
	case 1:
		return uint64(w.data[at])
	case 2:
		return uint64(binary.BigEndian.Uint16(w.data[at:]))
	default:
		return uint64(binary.BigEndian.Uint32(w.data[at:]))
	}
}

// str reads a map key as the library reads a struct's field name: a str,
// a bin or nil (""). ok is false, and the key skipped, for anything else
// (which the library refuses).
func (w *objWalker) str() (b []byte, ok bool, err error) {
	if w.p >= len(w.data) {
		return nil, false, w.truncated()
	}
	c := w.data[w.p]
	var n uint64
	switch {
	case c == 0xc0:
		w.p++
		return nil, true, nil
	case c >= 0xa0 && c <= 0xbf:
		n = uint64(c & 0x1f)
		w.p++
	case c == 0xc4, c == 0xc5, c == 0xc6, c == 0xd9, c == 0xda, c == 0xdb:
		size := 1 // bin8, str8
		switch c {
		case 0xc5, 0xda: // bin16, str16
			size = 2
		case 0xc6, 0xdb: // bin32, str32
			size = 4
		}
		if len(w.data)-w.p < 1+size {
			return nil, false, w.truncated()
		}
		n = w.uint(w.p+1, size)
		w.p += 1 + size
	default:
		return nil, false, w.skip()
	}
	if n > uint64(len(w.data)-w.p) {
		return nil, false, w.truncated()
	}
	b = w.data[w.p : w.p+int(n)]
	w.p += int(n)
	return b, true, nil
}

// skip steps over one value, however nested.
func (w *objWalker) skip() error { return w.skipN(1) }

// skipN steps over n values: each map entry counts two, each array
// element one, so one counter does for any nesting.
func (w *objWalker) skipN(n uint64) error {
	for ; n > 0; n-- {
		if w.p >= len(w.data) {
			return w.truncated()
		}
		c := w.data[w.p]
		w.p++
		var skip, lenSize int
		var children uint64
		switch {
		case c <= 0x7f || c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		case c <= 0x8f:
			children = 2 * uint64(c&0x0f)
		case c <= 0x9f:
			children = uint64(c & 0x0f)
		case c <= 0xbf:
			skip = int(c & 0x1f)
		default:
			switch c {
			case 0xc4, 0xd9:
				lenSize = 1
			case 0xc5, 0xda:
				lenSize = 2
			case 0xc6, 0xdb:
				lenSize = 4
			case 0xc7:
				lenSize, skip = 1, 1
			case 0xc8:
				lenSize, skip = 2, 1
			case 0xc9:
				lenSize, skip = 4, 1
			case 0xca, 0xce, 0xd2:
				skip = 4
			case 0xcb, 0xcf, 0xd3:
				skip = 8
			case 0xcc, 0xd0:
				skip = 1
			case 0xcd, 0xd1:
				skip = 2
			case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
				skip = 1 + 1<<(c-0xd4)
			case 0xdc, 0xdd, 0xde, 0xdf:
				w.p--
				m, err := w.length()
				if err != nil {
					return err
				}
				children = uint64(m)
				if c >= 0xde {
					children *= 2
				}
			default: // 0xc1, never used
				return fmt.Errorf("%w: reserved code 0x%x at offset %d", errMsgpackShape, c, w.p-1)
			}
		}
		if lenSize > 0 {
			if len(w.data)-w.p < lenSize {
				return w.truncated()
			}
			skip += int(w.uint(w.p, lenSize))
			w.p += lenSize
		}
		if skip > len(w.data)-w.p {
			return w.truncated()
		}
		w.p += skip
		n += children
	}
	return nil
}

func isArray(c byte) bool { return c >= 0x90 && c <= 0x9f || c == 0xdc || c == 0xdd }

func isMap(c byte) bool { return c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf }

func isExt(c byte) bool { return c >= 0xd4 && c <= 0xd8 || c >= 0xc7 && c <= 0xc9 }
