package auth

import (
	"sort"

	"github.com/iii-on-nats/iii/engine/wire"
)

// pageHeadroom is kept free of the max payload for the reply's headers
// and the fields around the providers.
const pageHeadroom = 1 << 10

// namesAfter is the tail of the sorted names that sort after cursor (all
// of them for "").
func namesAfter(names []string, cursor string) []string {
	return names[sort.Search(len(names), func(i int) bool { return names[i] > cursor }):]
}

// fitPage builds the entries of names in order (build skips a name by
// returning false) while their encoding in codec fits maxPayload less
// [pageHeadroom], and says whether an entry was left out. The first entry
// always goes in (one is a few hundred bytes at most), so paging with
// after moves on. It builds only the entries it answers, and the one
// after them.
func fitPage[T any](codec wire.Codec, names []string, maxPayload int64, build func(name string) (T, bool)) ([]T, bool, error) {
	page := make([]T, 0, min(len(names), 256))
	room := maxPayload - pageHeadroom
	for _, name := range names {
		it, ok := build(name)
		if !ok {
			continue
		}
		b, err := codec.Marshal(&it)
		if err != nil {
			return nil, false, wire.Wrap(wire.CodeInternal, err, "auth entry of %s does not encode", name)
		}
		sz := int64(len(b)) + 1 // and a separator
		if sz > room && len(page) > 0 {
			return page, true, nil
		}
		room -= sz
		page = append(page, it)
	}
	return page, false, nil
}
