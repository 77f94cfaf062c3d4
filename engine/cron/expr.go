package cron

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Limits of an expression.
const (
	// MaxExpressionLen bounds an expression's length in bytes.
	MaxExpressionLen = 256
	// MinEvery is the shortest "@every" interval: every tick costs one KV
	// write per scheduler on the bus.
	MinEvery = 100 * time.Millisecond
	// searchYears bounds how far Next looks ahead. The Gregorian calendar,
	// weekdays included, repeats every 400 years, so a day that ever
	// matches matches within any 400 of them; a shorter window misses
	// rare days such as Feb 29 on an even weekday ("0 0 29 2 */2": none
	// from 2005 to 2019).
	searchYears = 400
)

// Expression is a parsed cron expression. Its zero value is not usable; get
// one from [Parse] or [ParseInLocation]. An Expression is immutable and safe
// for concurrent use.
type Expression struct {
	src string
	loc *time.Location

	// every > 0 makes this an "@every" schedule; the fields are unused.
	every time.Duration

	second, minute, hour, dom, month, dow uint64
	// domStar and dowStar record a day field written as "*" or "?": cron
	// ANDs the two day fields when either is a star and ORs them otherwise.
	domStar, dowStar bool
}

type bounds struct {
	name     string
	min, max int
	names    map[string]int
}

var (
	secondBounds = bounds{name: "second", min: 0, max: 59}
	minuteBounds = bounds{name: "minute", min: 0, max: 59}
	hourBounds   = bounds{name: "hour", min: 0, max: 23}
	domBounds    = bounds{name: "day of month", min: 1, max: 31}
	monthBounds  = bounds{name: "month", min: 1, max: 12, names: map[string]int{
		"JAN": 1, "FEB": 2, "MAR": 3, "APR": 4, "MAY": 5, "JUN": 6,
		"JUL": 7, "AUG": 8, "SEP": 9, "OCT": 10, "NOV": 11, "DEC": 12,
	}}
	// 7 is Sunday as well as 0; parse folds it onto 0.
	dowBounds = bounds{name: "day of week", min: 0, max: 7, names: map[string]int{
		"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6,
	}}
)

// descriptors are the "@name" shorthands and their five-field meaning.
var descriptors = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

// Parse parses expr in UTC. See [ParseInLocation].
func Parse(expr string) (*Expression, error) {
	return ParseInLocation(expr, time.UTC)
}

// ParseInLocation parses a cron expression whose wall-clock fields are read
// in loc (nil means UTC):
//
//   - five fields "minute hour day-of-month month day-of-week", or six with a
//     leading seconds field;
//   - each field a list ("1,15") of "*", a value, a range "a-b", each with an
//     optional step "/n" ("*/15", "10-50/5", "5/15" = from 5 to the end);
//   - month and weekday names (JAN..DEC, SUN..SAT, any case); weekday 7 is
//     Sunday; "?" is "*" in the day fields;
//   - "@yearly" (or "@annually"), "@monthly", "@weekly", "@daily" (or
//     "@midnight"), "@hourly";
//   - "@every <duration>" (Go syntax, "90s", "1h30m", at least [MinEvery]).
//
// When both day fields are restricted a day matches either of them (Vixie
// cron); when one is a star, both must match. An expression that can never
// fire ("0 0 30 2 *") is an error. Every error wraps [ErrInvalidExpression].
func ParseInLocation(expr string, loc *time.Location) (*Expression, error) {
	if loc == nil {
		loc = time.UTC
	}
	src := strings.TrimSpace(expr)
	x, err := parse(src, loc)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrInvalidExpression, truncate(src, 64), err)
	}
	return x, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func parse(src string, loc *time.Location) (*Expression, error) {
	if src == "" {
		return nil, fmt.Errorf("empty")
	}
	if len(src) > MaxExpressionLen {
		return nil, fmt.Errorf("longer than %d bytes", MaxExpressionLen)
	}
	x := &Expression{src: src, loc: loc}
	if strings.HasPrefix(src, "@") {
		name, arg, _ := strings.Cut(src, " ")
		name = strings.ToLower(name)
		if name == "@every" {
			d, err := time.ParseDuration(strings.TrimSpace(arg))
			if err != nil {
				return nil, fmt.Errorf("@every: %v", err)
			}
			if d < MinEvery {
				return nil, fmt.Errorf("@every %v is shorter than %v", d, MinEvery)
			}
			x.every = d
			return x, nil
		}
		fields, ok := descriptors[name]
		if !ok || strings.TrimSpace(arg) != "" {
			return nil, fmt.Errorf("unknown descriptor %q", truncate(src, 32))
		}
		src = fields
	}
	fields := strings.Fields(src)
	switch len(fields) {
	case 5:
		fields = append([]string{"0"}, fields...)
	case 6:
	default:
		return nil, fmt.Errorf("%d fields, want 5 or 6", len(fields))
	}
	var err error
	if x.second, err = parseField(fields[0], secondBounds); err != nil {
		return nil, err
	}
	if x.minute, err = parseField(fields[1], minuteBounds); err != nil {
		return nil, err
	}
	if x.hour, err = parseField(fields[2], hourBounds); err != nil {
		return nil, err
	}
	if x.dom, err = parseField(fields[3], domBounds); err != nil {
		return nil, err
	}
	if x.month, err = parseField(fields[4], monthBounds); err != nil {
		return nil, err
	}
	if x.dow, err = parseField(fields[5], dowBounds); err != nil {
		return nil, err
	}
	if x.dow&(1<<7) != 0 {
		x.dow = x.dow&^(1<<7) | 1
	}
	x.domStar = isStar(fields[3])
	x.dowStar = isStar(fields[5])
	// Reject expressions that never fire (Feb 30) now rather than at run time.
	// The reference start is a leap year, so Feb 29 is found.
	if x.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, loc).Add(-time.Second)).IsZero() {
		return nil, fmt.Errorf("never fires")
	}
	return x, nil
}

func isStar(f string) bool { return strings.HasPrefix(f, "*") || strings.HasPrefix(f, "?") }

// parseField parses one comma-separated field into a bit set.
func parseField(f string, b bounds) (uint64, error) {
	var bits uint64
	for part := range strings.SplitSeq(f, ",") {
		v, err := parsePart(part, b)
		if err != nil {
			return 0, fmt.Errorf("%s field %q: %v", b.name, truncate(f, 32), err)
		}
		bits |= v
	}
	return bits, nil
}

func parsePart(p string, b bounds) (uint64, error) {
	rng, stepStr, hasStep := strings.Cut(p, "/")
	lo, hi := b.min, b.max
	switch {
	case rng == "*" || rng == "?" && (b.name == domBounds.name || b.name == dowBounds.name):
	case rng == "":
		return 0, fmt.Errorf("empty list item")
	default:
		a, z, isRange := strings.Cut(rng, "-")
		var err error
		if lo, err = value(a, b); err != nil {
			return 0, err
		}
		hi = lo
		switch {
		case isRange:
			if hi, err = value(z, b); err != nil {
				return 0, err
			}
			if hi < lo {
				return 0, fmt.Errorf("range %d-%d runs backwards", lo, hi)
			}
		case hasStep:
			hi = b.max // "a/n" runs from a to the end of the field
		}
	}
	step := 1
	if hasStep {
		n, err := number(stepStr)
		if err != nil {
			return 0, fmt.Errorf("step: %v", err)
		}
		if n < 1 || n > b.max-b.min+1 {
			return 0, fmt.Errorf("step %d out of 1-%d", n, b.max-b.min+1)
		}
		step = n
	}
	var bits uint64
	for v := lo; v <= hi; v += step {
		bits |= 1 << uint(v)
	}
	return bits, nil
}

// value reads a number or a name within b.
func value(s string, b bounds) (int, error) {
	if b.names != nil {
		if v, ok := b.names[strings.ToUpper(s)]; ok {
			return v, nil
		}
	}
	n, err := number(s)
	if err != nil {
		return 0, err
	}
	if n < b.min || n > b.max {
		return 0, fmt.Errorf("%d out of %d-%d", n, b.min, b.max)
	}
	return n, nil
}

// number parses a short unsigned decimal (no sign, no spaces).
func number(s string) (int, error) {
	if s == "" || len(s) > 4 {
		return 0, fmt.Errorf("bad number %q", truncate(s, 8))
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("bad number %q", s)
		}
	}
	return strconv.Atoi(s)
}

// String is the expression as written (trimmed).
func (x *Expression) String() string { return x.src }

// Location is the time zone the expression's fields are read in.
func (x *Expression) Location() *time.Location { return x.loc }

// Every is the interval of an "@every" expression, zero otherwise.
func (x *Expression) Every() time.Duration { return x.every }

// Next is the first tick strictly after after, in the expression's
// location, or the zero time if there is none (within 400 years, a whole
// cycle of the calendar: only a wall time that daylight saving time
// always skips is never reached).
//
// "@every d" ticks at the multiples of d counted from the zero time
// (0001-01-01 UTC), not from when a scheduler started: every node computes
// the same ticks, and an interval that divides a day is aligned to UTC
// midnight ("@every 15m" ticks at :00, :15, :30, :45).
//
// The other expressions match wall-clock times in the location. On a
// daylight-saving change a wall time that does not exist (02:30 when
// clocks jump from 02:00 to 03:00) is skipped, and one that happens twice
// (01:30 when clocks fall back from 02:00 to 01:00) fires once, at its
// first occurrence: the repeated hour fires nothing, whatever time Next
// is asked from, so a scheduler that starts during it does not fire a
// wall time again.
func (x *Expression) Next(after time.Time) time.Time {
	if x.every > 0 {
		t := after.Truncate(x.every).Add(x.every)
		return t.In(x.loc)
	}
	// The search runs on wall-clock times, held as UTC times with the same
	// fields so that no DST change gets in the way; a wall time that
	// matches is mapped to its first instant in the location. It starts at
	// after's wall time: the first instants of earlier wall times are not
	// after after.
	w := after.In(x.loc)
	w = time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), 0, time.UTC)
	w = w.Add(time.Second) // ticks are whole seconds, strictly after after
	limit := w.Year() + searchYears
	for w.Year() <= limit {
		y, mo, d := w.Date()
		h, mi, s := w.Clock()
		// A field that does not match jumps to its next allowed value, or
		// carries into the next larger unit; then every field is checked
		// again.
		switch {
		case x.month&(1<<uint(mo)) == 0:
			if n := nextBit(x.month, int(mo)+1, 12); n >= 0 {
				w = time.Date(y, time.Month(n), 1, 0, 0, 0, 0, time.UTC)
			} else {
				w = time.Date(y+1, 1, 1, 0, 0, 0, 0, time.UTC)
			}
		case !x.dayMatches(w):
			w = time.Date(y, mo, d+1, 0, 0, 0, 0, time.UTC)
		case x.hour&(1<<uint(h)) == 0:
			if n := nextBit(x.hour, h+1, 23); n >= 0 {
				w = time.Date(y, mo, d, n, 0, 0, 0, time.UTC)
			} else {
				w = time.Date(y, mo, d+1, 0, 0, 0, 0, time.UTC)
			}
		case x.minute&(1<<uint(mi)) == 0:
			if n := nextBit(x.minute, mi+1, 59); n >= 0 {
				w = time.Date(y, mo, d, h, n, 0, 0, time.UTC)
			} else {
				w = time.Date(y, mo, d, h+1, 0, 0, 0, time.UTC)
			}
		case x.second&(1<<uint(s)) == 0:
			if n := nextBit(x.second, s+1, 59); n >= 0 {
				w = time.Date(y, mo, d, h, mi, n, 0, time.UTC)
			} else {
				w = time.Date(y, mo, d, h, mi+1, 0, 0, time.UTC)
			}
		default:
			if t, ok := firstInstant(w, x.loc); ok && t.After(after) {
				return t
			}
			// The wall time does not exist, or its first occurrence is
			// not after after (after is in a repeated hour).
			w = w.Add(time.Second)
		}
	}
	return time.Time{}
}

// firstInstant is the earliest instant whose wall clock in loc reads w's
// fields, and false when a DST gap skips that wall time. time.Date picks
// either instant of a repeated wall time (which one depends on the zone's
// side of UTC), so the one before the transition is looked for.
func firstInstant(w time.Time, loc *time.Location) (time.Time, bool) {
	y, mo, d := w.Date()
	h, mi, s := w.Clock()
	t := time.Date(y, mo, d, h, mi, s, 0, loc)
	if !sameWall(t, w) {
		return time.Time{}, false // normalized out of a gap
	}
	start, _ := t.ZoneBounds()
	if start.IsZero() {
		return t, true
	}
	_, cur := t.Zone()
	_, prev := start.Add(-time.Second).Zone()
	if prev > cur { // clocks went back at start: wall times repeat
		if e := t.Add(-time.Duration(prev-cur) * time.Second); e.Before(start) && sameWall(e, w) {
			return e, true
		}
	}
	return t, true
}

// sameWall reports whether t's wall clock (in its location) reads w's
// fields (w in UTC).
func sameWall(t, w time.Time) bool {
	y1, mo1, d1 := t.Date()
	y2, mo2, d2 := w.Date()
	h1, mi1, s1 := t.Clock()
	h2, mi2, s2 := w.Clock()
	return y1 == y2 && mo1 == mo2 && d1 == d2 && h1 == h2 && mi1 == mi2 && s1 == s2
}

// nextBit is the lowest set bit of set in [from, max], or -1.
func nextBit(set uint64, from, max int) int {
	if from > max {
		return -1
	}
	rest := set >> uint(from)
	if rest == 0 {
		return -1
	}
	n := from + bits.TrailingZeros64(rest)
	if n > max {
		return -1
	}
	return n
}

func (x *Expression) dayMatches(t time.Time) bool {
	domOK := x.dom&(1<<uint(t.Day())) != 0
	dowOK := x.dow&(1<<uint(t.Weekday())) != 0
	if x.domStar || x.dowStar {
		return domOK && dowOK
	}
	return domOK || dowOK
}
