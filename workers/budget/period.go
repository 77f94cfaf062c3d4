package budget

import "time"

// Period is the length of a budget's spend window. Periods are calendar
// windows in UTC; spend starts again from zero in every window.
type Period string

// The periods.
const (
	// PeriodDay starts at midnight UTC.
	PeriodDay Period = "day"
	// PeriodWeek is an ISO week: it starts on Monday 00:00 UTC.
	PeriodWeek Period = "week"
	// PeriodMonth starts on the 1st of the month, 00:00 UTC.
	PeriodMonth Period = "month"
)

// Valid reports whether p is one of the periods.
func (p Period) Valid() bool {
	switch p {
	case PeriodDay, PeriodWeek, PeriodMonth:
		return true
	}
	return false
}

// Bounds returns the window of p that contains t: start (inclusive) and
// end (exclusive), both in UTC. An invalid period has the day's bounds.
func (p Period) Bounds(t time.Time) (start, end time.Time) {
	t = t.UTC()
	y, m, d := t.Date()
	switch p {
	case PeriodWeek:
		// Monday is day 0 of an ISO week; time.Weekday counts from Sunday.
		back := (int(t.Weekday()) + 6) % 7
		start = time.Date(y, m, d-back, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 7)
	case PeriodMonth:
		start = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 1, 0)
	default:
		start = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 1)
	}
}

// periodToken names a window in a KV key: its start date, "20260105".
func periodToken(start time.Time) string { return start.UTC().Format("20060102") }
