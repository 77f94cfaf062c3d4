package compaction

import (
	"context"
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// WithRescanInterval sets how often the threshold trigger lists the
// events stream's regional copies (default 30 s), so tests see a copy
// that appears later without waiting.
func WithRescanInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: rescan interval %v", engine.ErrInvalidOption, d)
		}
		o.rescan = d
		return nil
	}
}

// CompactionDedupID is compactionDedupID for the tests.
var CompactionDedupID = compactionDedupID

// SetBackgroundCompact replaces what the threshold trigger runs until
// the test ends.
func SetBackgroundCompact(t interface{ Cleanup(func()) }, f func(ctx context.Context, req CompactRequest) (CompactResponse, error)) {
	old := backgroundCompact
	backgroundCompact = func(_ *compactor, ctx context.Context, req CompactRequest, _ int64) (CompactResponse, error) {
		return f(ctx, req)
	}
	t.Cleanup(func() { backgroundCompact = old })
}

// EntryLimit is the entry limit the worker's options come to.
func (w *Worker) EntryLimit() (int, error) {
	o, err := buildOptions(w.opts)
	if err != nil {
		return 0, err
	}
	return o.maxEntrySize, nil
}
