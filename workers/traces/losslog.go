package traces

import (
	"log/slog"
	"sync"
	"time"
)

// lossLogEvery is the least time between two records of a [lossLog].
const lossLogEvery = time.Minute

// lossLog reports lost spans (dropped, failed, invalid) at Warn without
// flooding the log: the first loss at once, then at most one record per
// lossLogEvery with the counts since the last record. A collector or a
// stream that is down, or a client publishing garbage, loses spans by the
// thousand; the exact counts are in the stats.
type lossLog struct {
	logger *slog.Logger
	msg    string
	now    func() time.Time

	mu      sync.Mutex
	last    time.Time
	counts  [3]uint64 // dropped, failed, invalid since the last record
	lastErr error
}

func newLossLog(logger *slog.Logger, msg string) *lossLog {
	return &lossLog{logger: logger, msg: msg, now: time.Now}
}

// note counts a loss; err is its cause, if any.
func (l *lossLog) note(dropped, failed, invalid uint64, err error) {
	l.mu.Lock()
	l.counts[0] += dropped
	l.counts[1] += failed
	l.counts[2] += invalid
	if err != nil {
		l.lastErr = err
	}
	now := l.now()
	if !l.last.IsZero() && now.Sub(l.last) < lossLogEvery {
		l.mu.Unlock()
		return
	}
	c, e := l.counts, l.lastErr
	l.last, l.counts, l.lastErr = now, [3]uint64{}, nil
	l.mu.Unlock()
	attrs := []any{slog.Uint64("dropped", c[0]), slog.Uint64("failed", c[1]), slog.Uint64("invalid", c[2])}
	if e != nil {
		attrs = append(attrs, slog.Any("error", e))
	}
	l.logger.Warn(l.msg, attrs...)
}
