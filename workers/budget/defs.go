package budget

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// defs is a node's copy of the budget definitions, fed by a watch on
// "def.*": matching a call to its budgets reads memory, not the bucket.
type defs struct {
	logger *slog.Logger

	mu      sync.RWMutex
	byID    map[string]Budget
	changed chan struct{} // closed and replaced on every change
}

func newDefs(logger *slog.Logger) *defs {
	return &defs{logger: logger, byID: map[string]Budget{}, changed: make(chan struct{})}
}

// decode reads a watched entry: the budget it defines, or false for a
// delete, a purge or a value that is not a budget (logged).
func (d *defs) decode(ent jetstream.KeyValueEntry) (Budget, bool) {
	if ent.Operation() != jetstream.KeyValuePut {
		return Budget{}, false
	}
	id := strings.TrimPrefix(ent.Key(), defPrefix)
	var b Budget
	err := json.Unmarshal(ent.Value(), &b)
	switch {
	case err != nil:
	case b.BudgetID != id:
		err = fmt.Errorf("it names budget %q", b.BudgetID)
	case !b.Period.Valid():
		err = fmt.Errorf("unknown period %q", b.Period)
	case !(b.CeilingUSD > 0):
		err = fmt.Errorf("ceiling %v is not positive", b.CeilingUSD)
	}
	if err != nil {
		d.logger.Warn("budget definition is not one; ignored", "key", ent.Key(), "error", err)
		return Budget{}, false
	}
	if b.AlertThresholds == nil {
		b.AlertThresholds = []float64{}
	}
	return b, true
}

// apply folds one watched change in; the watch delivers in revision order.
func (d *defs) apply(ent jetstream.KeyValueEntry) {
	id := strings.TrimPrefix(ent.Key(), defPrefix)
	b, put := d.decode(ent)
	d.mu.Lock()
	if put {
		d.byID[id] = b
	} else {
		delete(d.byID, id)
	}
	d.signal()
	d.mu.Unlock()
}

// replace makes byID the whole copy: a watch's snapshot, which replaces
// what an earlier watch (of a bucket since deleted or created again) built.
func (d *defs) replace(byID map[string]Budget) {
	d.mu.Lock()
	d.byID = byID
	d.signal()
	d.mu.Unlock()
}

// signal wakes the waiters; d.mu is held.
func (d *defs) signal() {
	close(d.changed)
	d.changed = make(chan struct{})
}

func (d *defs) get(id string) (Budget, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	b, ok := d.byID[id]
	return b, ok
}

// list returns the budgets keep accepts, sorted by id; never nil.
func (d *defs) list(keep func(Budget) bool) []Budget {
	d.mu.RLock()
	out := make([]Budget, 0, len(d.byID))
	for _, b := range d.byID {
		if keep == nil || keep(b) {
			out = append(out, b)
		}
	}
	d.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].BudgetID < out[j].BudgetID })
	return out
}

// wait blocks until cond holds (checked under the read lock after every
// change) or ctx ends; it reports whether cond held.
func (d *defs) wait(ctx context.Context, cond func() bool) bool {
	for {
		d.mu.RLock()
		ok, ch := cond(), d.changed
		d.mu.RUnlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}
