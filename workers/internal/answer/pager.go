package answer

import "github.com/iii-on-nats/iii/engine/wire"

// Headroom is kept free of the max payload for the reply envelope around
// a list: its headers and the other fields of the answer.
const Headroom = 1 << 10

// Pager admits the items of one answer while they fit; the zero value
// admits nothing but the first item.
type Pager struct {
	codec wire.Codec
	room  int
	n     int
}

// NewPager is a pager for an answer encoded in codec on a bus whose max
// payload is maxPayload bytes.
func NewPager(codec wire.Codec, maxPayload int64) *Pager {
	return &Pager{codec: codec, room: int(maxPayload) - Headroom}
}

// Fits reports whether v still fits the answer, and counts it if so (one
// byte more per item for its separator). The first item always fits. The
// error is internal: v does not encode.
func (p *Pager) Fits(v any) (bool, error) {
	b, err := p.codec.Marshal(v)
	if err != nil {
		return false, wire.Wrap(wire.CodeInternal, err, "an item of the answer does not encode")
	}
	if p.room -= len(b) + 1; p.room < 0 && p.n > 0 {
		return false, nil
	}
	p.n++
	return true, nil
}

// Page is the longest prefix of items that fits p; truncated says items
// were left out.
func Page[T any](items []T, p *Pager) (page []T, truncated bool, err error) {
	page = make([]T, 0, len(items))
	for _, it := range items {
		ok, err := p.Fits(it)
		if err != nil {
			return nil, false, err
		}
		if !ok {
			return page, true, nil
		}
		page = append(page, it)
	}
	return page, false, nil
}
