package budget

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// withBucketCheck sets how often the ledger checks that its bucket was
// not deleted or created again.
func withBucketCheck(d time.Duration) Option {
	return func(o *options) error {
		o.bucketCheck = d
		return nil
	}
}

// TestDefinitionsFollowBucketCreatedAgain: a ledger bucket deleted and
// created again under a running node (`nats kv rm`/`add`, a restore) is
// followed again. Before, the node's copy of the definitions stayed the
// old bucket's for good: a budget created afterwards was never matched
// by scope on that node (its reserves were granted with no ceiling),
// and a budget of the old bucket was still enforced.
func TestDefinitionsFollowBucketCreatedAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t, withBucketCheck(50*time.Millisecond))
	ctx := ctxT(t)
	f.create(t, CreateRequest{BudgetID: "old", WorkspaceID: "W", CeilingUSD: 1, Period: PeriodDay})

	js := f.e.JetStream()
	if err := js.DeleteKeyValue(ctx, subjects.BudgetsBucket); err != nil {
		t.Fatal(err)
	}
	kv := enginetest.CreateKV(t, js, BucketConfig())
	data, err := wire.MarshalJSON(Budget{BudgetID: "new", CeilingUSD: 1, Period: PeriodDay, WorkspaceID: "W2", AlertThresholds: []float64{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, defKey("new"), data); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, 10*time.Second, func() error {
		got := f.l.defs.list(nil)
		if len(got) != 1 || got[0].BudgetID != "new" {
			return fmt.Errorf("definitions %+v, want only the new bucket's", got)
		}
		return nil
	})
	// The new budget is enforced by scope, the old one no longer.
	if _, err := f.reserve(t, ReserveRequest{WorkspaceID: "W2", EstimatedUSD: 2, ReservationID: "r1"}); !errors.Is(err, wire.ErrBudgetExceeded) {
		t.Fatalf("reserve over the new budget: %v", err)
	}
	r, err := f.reserve(t, ReserveRequest{WorkspaceID: "W", EstimatedUSD: 2, ReservationID: "r2"})
	if err != nil || len(r.Budgets) != 0 {
		t.Fatalf("reserve under the gone budget: %+v, %v", r, err)
	}
	// And the new bucket is followed live.
	if _, err := f.l.Delete(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	if got := f.l.defs.list(nil); len(got) != 0 {
		t.Fatalf("after delete: %+v", got)
	}
}
