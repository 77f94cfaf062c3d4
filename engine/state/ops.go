package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/iii-on-nats/iii/engine/wire"
)

// OpType names an update operation.
type OpType string

// The update operations; their exact semantics are in the package
// documentation.
const (
	OpSet       OpType = "set"
	OpIncrement OpType = "increment"
	OpDecrement OpType = "decrement"
	OpAppend    OpType = "append"
	OpRemove    OpType = "remove"
	OpMerge     OpType = "merge"
)

// Limits of one update.
const (
	// MaxOps bounds the operations of one update.
	MaxOps = 256
	// MaxPathDepth bounds the segments of an operation's path.
	MaxPathDepth = 32
	// MaxPathLen bounds an operation's path in bytes.
	MaxPathLen = 1024
)

// Op is one update operation: Type applied at Path, a '.'-separated path
// into the value ("" is the value itself; "counters.hits"; a segment that
// meets an array is a decimal index, "items.0.name").
type Op struct {
	Type OpType `json:"type"`
	Path string `json:"path,omitempty"`
	// Value is the operand of set, append, merge and (optionally) remove.
	// Any Go value with a JSON encoding; it is copied, never aliased.
	Value any `json:"value,omitempty"`
	// By is the operand of increment and decrement, a Go number (any
	// integer or float type, or a json.Number); nil means 1. An integer
	// by keeps an integer target exact; a float makes the result a float.
	By any `json:"by,omitempty"`
}

// UnmarshalJSON decodes op with exact numbers in Value and By, as the
// state functions read a request: an integer past 2^53 keeps its digits.
func (op *Op) UnmarshalJSON(b []byte) error {
	type plain Op
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var p plain
	if err := dec.Decode(&p); err != nil {
		return err
	}
	var err error
	if p.Value, err = exactNumbers(p.Value); err != nil {
		return err
	}
	if p.By, err = exactNumbers(p.By); err != nil {
		return err
	}
	*op = Op(p)
	return nil
}

// Number is the Go number types [Increment] and [Decrement] take.
type Number interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr |
		~float32 | ~float64
}

// Set returns a set operation.
func Set(path string, value any) Op { return Op{Type: OpSet, Path: path, Value: value} }

// Increment returns an increment operation by by: Increment("n", 1) adds
// the integer 1, Increment("n", 0.5) the float 0.5.
func Increment[N Number](path string, by N) Op { return Op{Type: OpIncrement, Path: path, By: by} }

// Decrement returns a decrement operation by by.
func Decrement[N Number](path string, by N) Op { return Op{Type: OpDecrement, Path: path, By: by} }

// Append returns an append operation.
func Append(path string, value any) Op { return Op{Type: OpAppend, Path: path, Value: value} }

// Remove returns a remove operation: with a nil value it removes the field
// or array element at path, otherwise every element of the array at path
// equal to value.
func Remove(path string, value any) Op { return Op{Type: OpRemove, Path: path, Value: value} }

// Merge returns a (shallow) merge operation; value must be an object.
func Merge(path string, value any) Op { return Op{Type: OpMerge, Path: path, Value: value} }

// Apply evaluates ops in order against value and returns the result. value
// is never modified (Apply works on a copy), and on error nothing of the
// result escapes: an update either applies every op or none. Every error is
// an invalid_payload *wire.Error wrapping [ErrInvalidOp] or
// [ErrInvalidValue], naming the failing op's index.
func Apply(value any, ops []Op) (any, error) {
	if err := validateOps(ops); err != nil {
		return nil, err
	}
	root, err := normalize(value)
	if err != nil {
		return nil, wire.Wrap(wire.CodeInvalidPayload, err, "current value")
	}
	for i, op := range ops {
		root, err = applyOp(root, op)
		if err != nil {
			return nil, opError(i, op, err)
		}
	}
	return asRead(root), nil
}

func opError(i int, op Op, err error) *wire.Error {
	return wire.Wrap(wire.CodeInvalidPayload, err, "ops[%d] (%s %q)", i, op.Type, op.Path)
}

// validateOps checks the shape of every op before anything is read.
func validateOps(ops []Op) error {
	if len(ops) == 0 {
		return wire.Wrap(wire.CodeInvalidPayload, ErrInvalidOp, "ops is empty")
	}
	if len(ops) > MaxOps {
		return wire.Wrap(wire.CodeInvalidPayload, ErrInvalidOp, "%d ops, at most %d", len(ops), MaxOps)
	}
	for i, op := range ops {
		if err := validateOp(op); err != nil {
			return opError(i, op, err)
		}
	}
	return nil
}

func validateOp(op Op) error {
	if _, err := parsePath(op.Path); err != nil {
		return err
	}
	switch op.Type {
	case OpIncrement, OpDecrement:
		if op.Value != nil {
			return fmt.Errorf("%w: %s takes by, not value", ErrInvalidOp, op.Type)
		}
		if op.By != nil {
			if _, err := byOperand(op); err != nil {
				return err
			}
		}
	case OpSet, OpAppend, OpRemove, OpMerge:
		if op.By != nil {
			return fmt.Errorf("%w: %s takes value, not by", ErrInvalidOp, op.Type)
		}
	case "":
		return fmt.Errorf("%w: type is required (set, increment, decrement, append, remove, merge)", ErrInvalidOp)
	default:
		return fmt.Errorf("%w: unknown type %q (set, increment, decrement, append, remove, merge)", ErrInvalidOp, op.Type)
	}
	return nil
}

// byOperand is op's by in the decoded shape: the integer 1 when unset.
func byOperand(op Op) (any, error) {
	if op.By == nil {
		return int64(1), nil
	}
	n, err := normalize(op.By)
	if err != nil {
		return nil, fmt.Errorf("%w: by must be a finite number: %v", ErrInvalidOp, err)
	}
	if !isNumber(n) {
		return nil, fmt.Errorf("%w: by must be a number, not %s", ErrInvalidOp, typeName(n))
	}
	return n, nil
}

// parsePath splits a dot path; "" is the root (no segments).
func parsePath(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if len(p) > MaxPathLen {
		return nil, fmt.Errorf("%w: path longer than %d bytes", ErrInvalidOp, MaxPathLen)
	}
	segs := strings.Split(p, ".")
	if len(segs) > MaxPathDepth {
		return nil, fmt.Errorf("%w: path deeper than %d segments", ErrInvalidOp, MaxPathDepth)
	}
	for _, s := range segs {
		if s == "" {
			return nil, fmt.Errorf("%w: path %q has an empty segment", ErrInvalidOp, p)
		}
	}
	return segs, nil
}

// edit computes a target's new value from its current one (cur is nil and
// exists false when the target is missing). It returns keep=false to remove
// the target.
type edit func(cur any, exists bool) (next any, keep bool, err error)

func applyOp(root any, op Op) (any, error) {
	segs, err := parsePath(op.Path)
	if err != nil {
		return nil, err
	}
	fn, create, err := editFor(op)
	if err != nil {
		return nil, err
	}
	return editAt(root, segs, create, fn)
}

// editFor returns the edit of op and whether missing intermediate objects
// are created on the way to its target (every op but remove).
func editFor(op Op) (edit, bool, error) {
	switch op.Type {
	case OpSet:
		v, err := normalize(op.Value)
		if err != nil {
			return nil, false, err
		}
		return func(any, bool) (any, bool, error) { return v, true, nil }, true, nil
	case OpIncrement, OpDecrement:
		by, err := byOperand(op)
		if err != nil {
			return nil, false, err
		}
		return func(cur any, _ bool) (any, bool, error) {
			if cur == nil {
				cur = int64(0)
			} else if !isNumber(cur) {
				return nil, false, fmt.Errorf("%w: cannot %s a %s", ErrInvalidOp, op.Type, typeName(cur))
			}
			r, err := add(cur, by, op.Type == OpDecrement)
			if err != nil {
				return nil, false, fmt.Errorf("%s overflows: %w", op.Type, err)
			}
			return r, true, nil
		}, true, nil
	case OpAppend:
		v, err := normalize(op.Value)
		if err != nil {
			return nil, false, err
		}
		return func(cur any, _ bool) (any, bool, error) {
			switch c := cur.(type) {
			case nil:
				return []any{v}, true, nil
			case []any:
				return append(c, v), true, nil
			case string:
				s, ok := v.(string)
				if !ok {
					return nil, false, fmt.Errorf("%w: cannot append a %s to a string", ErrInvalidOp, typeName(v))
				}
				return c + s, true, nil
			}
			return nil, false, fmt.Errorf("%w: cannot append to a %s", ErrInvalidOp, typeName(cur))
		}, true, nil
	case OpRemove:
		if op.Value == nil {
			return func(cur any, exists bool) (any, bool, error) { return nil, false, nil }, false, nil
		}
		v, err := normalize(op.Value)
		if err != nil {
			return nil, false, err
		}
		return func(cur any, exists bool) (any, bool, error) {
			switch c := cur.(type) {
			case nil:
				return cur, exists, nil
			case []any:
				out := c[:0]
				for _, e := range c {
					if !equal(e, v) {
						out = append(out, e)
					}
				}
				return out, true, nil
			}
			return nil, false, fmt.Errorf("%w: cannot remove elements from a %s", ErrInvalidOp, typeName(cur))
		}, false, nil
	case OpMerge:
		v, err := normalize(op.Value)
		if err != nil {
			return nil, false, err
		}
		patch, ok := v.(map[string]any)
		if !ok {
			return nil, false, fmt.Errorf("%w: merge value must be an object, not a %s", ErrInvalidOp, typeName(v))
		}
		return func(cur any, _ bool) (any, bool, error) {
			switch c := cur.(type) {
			case nil:
				return patch, true, nil
			case map[string]any:
				for k, e := range patch {
					c[k] = e
				}
				return c, true, nil
			}
			return nil, false, fmt.Errorf("%w: cannot merge into a %s", ErrInvalidOp, typeName(cur))
		}, true, nil
	}
	return nil, false, fmt.Errorf("%w: unknown type %q", ErrInvalidOp, op.Type)
}

// editAt applies fn to the target at segs below node and returns the new
// node. Missing or null intermediates become objects when create is set;
// otherwise (remove) a missing path leaves node unchanged.
func editAt(node any, segs []string, create bool, fn edit) (any, error) {
	if len(segs) == 0 {
		next, keep, err := fn(node, node != nil)
		if err != nil {
			return nil, err
		}
		if !keep {
			return nil, nil
		}
		return next, nil
	}
	seg, rest := segs[0], segs[1:]
	switch n := node.(type) {
	case nil:
		if !create {
			return nil, nil
		}
		return editAt(map[string]any{}, segs, create, fn)
	case map[string]any:
		child, ok := n[seg]
		if len(rest) == 0 {
			next, keep, err := fn(child, ok)
			if err != nil {
				return nil, err
			}
			if keep {
				n[seg] = next
			} else {
				delete(n, seg)
			}
			return n, nil
		}
		if child == nil && !create {
			return n, nil
		}
		next, err := editAt(child, rest, create, fn)
		if err != nil {
			return nil, err
		}
		n[seg] = next
		return n, nil
	case []any:
		i, err := strconv.Atoi(seg)
		if err != nil || i < 0 || strconv.Itoa(i) != seg {
			return nil, fmt.Errorf("%w: %q is not an index into an array", ErrInvalidOp, seg)
		}
		if i >= len(n) {
			if !create {
				return n, nil
			}
			return nil, fmt.Errorf("%w: index %d out of range (length %d)", ErrInvalidOp, i, len(n))
		}
		if len(rest) == 0 {
			next, keep, err := fn(n[i], true)
			if err != nil {
				return nil, err
			}
			if !keep {
				return append(n[:i:i], n[i+1:]...), nil
			}
			n[i] = next
			return n, nil
		}
		if n[i] == nil && !create {
			return n, nil
		}
		next, err := editAt(n[i], rest, create, fn)
		if err != nil {
			return nil, err
		}
		n[i] = next
		return n, nil
	}
	return nil, fmt.Errorf("%w: cannot descend into a %s at %q", ErrInvalidOp, typeName(node), seg)
}
