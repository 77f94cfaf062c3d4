package budget

import (
	"sort"

	"github.com/iii-on-nats/iii/workers/internal/answer"
)

// after returns the budgets (sorted by id) whose id sorts after id; all of
// them when id is empty.
func after(budgets []Budget, id string) []Budget {
	if id == "" {
		return budgets
	}
	return budgets[sort.Search(len(budgets), func(i int) bool { return budgets[i].BudgetID > id }):]
}

// listPage is the page of budgets after req.After that fits p.
func listPage(budgets []Budget, req ListRequest, p *answer.Pager) (ListResponse, error) {
	page, truncated, err := answer.Page(after(budgets, req.After), p)
	return ListResponse{Budgets: page, Truncated: truncated}, err
}
