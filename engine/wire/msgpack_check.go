package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// maxMsgpackDepth bounds nesting of msgpack arrays and maps.
const maxMsgpackDepth = 256

var errMsgpackShape = errors.New("malformed msgpack")

// checkMsgpack walks data once, without allocating per element, and refuses
// what would hurt the decoder: a declared length larger than the bytes left
// (vmihailenco/msgpack v5.4.1 pre-allocates declared array lengths, so a
// 5-byte header claiming 2^32 elements runs the process out of memory),
// nesting deeper than maxMsgpackDepth (the decoder recurses), the reserved
// code 0xc1, truncation, and trailing bytes. See docs/UPSTREAM.md.
func checkMsgpack(data []byte) error {
	stack := make([]uint64, 1, 16) // items still to read at each open level
	stack[0] = 1
	p := 0
	need := func(n uint64) error {
		if uint64(len(data)-p) < n {
			return fmt.Errorf("%w: %d bytes declared, %d left at offset %d", errMsgpackShape, n, len(data)-p, p)
		}
		return nil
	}
	readN := func(size int) (uint64, error) {
		if err := need(uint64(size)); err != nil {
			return 0, err
		}
		var v uint64
		switch size {
		case 1:
			v = uint64(data[p])
		case 2:
			v = uint64(binary.BigEndian.Uint16(data[p:]))
		case 4:
			v = uint64(binary.BigEndian.Uint32(data[p:]))
		}
		p += size
		return v, nil
	}
	for len(stack) > 0 {
		top := len(stack) - 1
		if stack[top] == 0 {
			stack = stack[:top]
			continue
		}
		stack[top]--
		if p >= len(data) {
			return fmt.Errorf("%w: truncated at offset %d", errMsgpackShape, p)
		}
		c := data[p]
		p++
		var skip, children uint64
		var err error
		switch {
		case c <= 0x7f || c >= 0xe0: // fixint
		case c <= 0x8f: // fixmap
			children = 2 * uint64(c&0x0f)
		case c <= 0x9f: // fixarray
			children = uint64(c & 0x0f)
		case c <= 0xbf: // fixstr
			skip = uint64(c & 0x1f)
		default:
			switch c {
			case 0xc0, 0xc2, 0xc3:
			case 0xc1:
				return fmt.Errorf("%w: reserved code 0xc1 at offset %d", errMsgpackShape, p-1)
			case 0xc4, 0xd9: // bin8, str8
				skip, err = readN(1)
			case 0xc5, 0xda: // bin16, str16
				skip, err = readN(2)
			case 0xc6, 0xdb: // bin32, str32
				skip, err = readN(4)
			case 0xc7: // ext8
				skip, err = readN(1)
				skip++
			case 0xc8: // ext16
				skip, err = readN(2)
				skip++
			case 0xc9: // ext32
				skip, err = readN(4)
				skip++
			case 0xca, 0xce, 0xd2:
				skip = 4
			case 0xcb, 0xcf, 0xd3:
				skip = 8
			case 0xcc, 0xd0:
				skip = 1
			case 0xcd, 0xd1:
				skip = 2
			case 0xd4:
				skip = 2
			case 0xd5:
				skip = 3
			case 0xd6:
				skip = 5
			case 0xd7:
				skip = 9
			case 0xd8:
				skip = 17
			case 0xdc: // array16
				children, err = readN(2)
			case 0xdd: // array32
				children, err = readN(4)
			case 0xde: // map16
				children, err = readN(2)
				children *= 2
			case 0xdf: // map32
				children, err = readN(4)
				children *= 2
			}
		}
		if err != nil {
			return err
		}
		if skip > 0 {
			if err := need(skip); err != nil {
				return err
			}
			p += int(skip)
		}
		if children > 0 {
			// Every element takes at least one byte.
			if err := need(children); err != nil {
				return err
			}
			if len(stack) >= maxMsgpackDepth {
				return fmt.Errorf("%w: nested deeper than %d", errMsgpackShape, maxMsgpackDepth)
			}
			stack = append(stack, children)
		}
	}
	if p != len(data) {
		return fmt.Errorf("%w: %d bytes of trailing data after the value", errMsgpackShape, len(data)-p)
	}
	return nil
}
