package budget

import (
	"sort"

	"github.com/iii-on-nats/iii/engine/wire"
)

// answerHeadroom is kept free of the server's max payload for the reply
// envelope around a list (its headers, the truncated flag).
const answerHeadroom = 1 << 10

// pager admits the items of one answer while their encoding, in the
// request's codec, fits what the max payload leaves; the first item is
// always admitted, so that paging moves on.
type pager struct {
	codec wire.Codec
	room  int
	n     int
}

func newPager(codec wire.Codec, maxPayload int64) *pager {
	return &pager{codec: codec, room: int(maxPayload) - answerHeadroom}
}

// fits reports whether v still fits the answer, and counts it if so.
func (p *pager) fits(v any) (bool, error) {
	b, err := p.codec.Marshal(v)
	if err != nil {
		return false, wire.Wrap(wire.CodeInternal, err, "answer does not encode")
	}
	if p.room -= len(b) + 1; p.room < 0 && p.n > 0 {
		return false, nil
	}
	p.n++
	return true, nil
}

// after returns the budgets (sorted by id) whose id sorts after id; all of
// them when id is empty.
func after(budgets []Budget, id string) []Budget {
	if id == "" {
		return budgets
	}
	return budgets[sort.Search(len(budgets), func(i int) bool { return budgets[i].BudgetID > id }):]
}

// listPage is the page of budgets after req.After that fits p.
func listPage(budgets []Budget, req ListRequest, p *pager) (ListResponse, error) {
	budgets = after(budgets, req.After)
	resp := ListResponse{Budgets: make([]Budget, 0, len(budgets))}
	for _, b := range budgets {
		ok, err := p.fits(b)
		if err != nil {
			return ListResponse{}, err
		}
		if !ok {
			resp.Truncated = true
			break
		}
		resp.Budgets = append(resp.Budgets, b)
	}
	return resp, nil
}
