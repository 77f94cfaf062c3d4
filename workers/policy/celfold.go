package policy

import (
	"reflect"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// foldAdapter presents canonical args to the conditions of deny and
// needs_approval rules: an object's key lookup (args.cmd, has(args.cmd),
// "cmd" in args, args["cmd"]) falls back to the key equal up to case when
// the exact key is absent, as a Go handler decoding into a `json:"cmd"`
// field would read "Cmd". Without it, a guard such as has(args.cmd) let
// {"Cmd": "rm -rf /"} past a deny. inspectArgs has refused objects with
// two such keys, so the fallback finds at most one. One adapter serves one
// check (it caches the folded index of each object it has looked into).
type foldAdapter struct {
	maps map[uintptr]*foldMap
}

func (a *foldAdapter) NativeToValue(v any) ref.Val {
	switch x := v.(type) {
	case map[string]any:
		id := reflect.ValueOf(x).Pointer()
		if fm, ok := a.maps[id]; ok {
			return fm
		}
		if a.maps == nil {
			a.maps = map[uintptr]*foldMap{}
		}
		fm := &foldMap{Mapper: types.NewStringInterfaceMap(a, x), m: x}
		a.maps[id] = fm
		return fm
	case []any:
		return types.NewDynamicList(a, x)
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

// foldMap is a CEL map over a canonical args object whose lookups fall
// back to a key equal up to case.
type foldMap struct {
	traits.Mapper
	m     map[string]any
	index map[string]string // foldKey -> key, built on the first miss
}

// Find takes the exact key, or else the one key equal to it up to case.
func (f *foldMap) Find(key ref.Val) (ref.Val, bool) {
	if v, ok := f.Mapper.Find(key); ok || v != nil {
		return v, ok
	}
	s, ok := key.(types.String)
	if !ok {
		return nil, false
	}
	if f.index == nil {
		f.index = make(map[string]string, len(f.m))
		for k := range f.m {
			f.index[foldKey(k)] = k
		}
	}
	k, ok := f.index[foldKey(string(s))]
	if !ok {
		return nil, false
	}
	return f.Mapper.Find(types.String(k))
}

// Contains reports whether Find finds key.
func (f *foldMap) Contains(key ref.Val) ref.Val {
	v, ok := f.Find(key)
	if !ok && v != nil {
		return v
	}
	return types.Bool(ok)
}

// Get is Find, with the no-such-key error of a CEL map.
func (f *foldMap) Get(key ref.Val) ref.Val {
	v, ok := f.Find(key)
	if !ok {
		return types.ValOrErr(v, "no such key: %v", key)
	}
	return v
}
