package cron

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestNext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr string
		from string
		want []string // successive ticks
	}{
		{"* * * * *", "2024-03-10T10:20:30Z", []string{"2024-03-10T10:21:00Z", "2024-03-10T10:22:00Z"}},
		{"*/15 * * * *", "2024-03-10T10:20:30Z", []string{"2024-03-10T10:30:00Z", "2024-03-10T10:45:00Z", "2024-03-10T11:00:00Z"}},
		{"0 * * * *", "2024-03-10T10:00:00Z", []string{"2024-03-10T11:00:00Z"}},
		{"0 0 * * *", "2024-12-31T23:59:59.999Z", []string{"2025-01-01T00:00:00Z", "2025-01-02T00:00:00Z"}},
		{"30 2 * * *", "2024-03-10T02:30:00Z", []string{"2024-03-11T02:30:00Z"}},
		{"5,10-12 8 * * *", "2024-01-01T08:09:00Z", []string{"2024-01-01T08:10:00Z", "2024-01-01T08:11:00Z", "2024-01-01T08:12:00Z", "2024-01-02T08:05:00Z"}},
		{"10-50/20 * * * *", "2024-01-01T00:00:00Z", []string{"2024-01-01T00:10:00Z", "2024-01-01T00:30:00Z", "2024-01-01T00:50:00Z", "2024-01-01T01:10:00Z"}},
		{"5/20 * * * *", "2024-01-01T00:00:00Z", []string{"2024-01-01T00:05:00Z", "2024-01-01T00:25:00Z", "2024-01-01T00:45:00Z", "2024-01-01T01:05:00Z"}},
		{"0 9 * * MON-FRI", "2024-03-08T09:00:00Z", []string{"2024-03-11T09:00:00Z", "2024-03-12T09:00:00Z"}}, // Fri → Mon
		{"0 9 * * mon,wed", "2024-03-08T00:00:00Z", []string{"2024-03-11T09:00:00Z", "2024-03-13T09:00:00Z"}},
		{"0 0 * * 7", "2024-03-08T00:00:00Z", []string{"2024-03-10T00:00:00Z"}}, // 7 = Sunday
		{"0 0 * * 0", "2024-03-08T00:00:00Z", []string{"2024-03-10T00:00:00Z"}},
		{"0 0 * * 5-7", "2024-03-08T00:00:00Z", []string{"2024-03-09T00:00:00Z", "2024-03-10T00:00:00Z", "2024-03-15T00:00:00Z"}},
		{"0 0 1 JAN,jul *", "2024-02-01T00:00:00Z", []string{"2024-07-01T00:00:00Z", "2025-01-01T00:00:00Z"}},
		{"0 0 1 */3 *", "2024-02-01T00:00:00Z", []string{"2024-04-01T00:00:00Z", "2024-07-01T00:00:00Z"}},
		{"0 0 31 * *", "2024-01-31T00:00:00Z", []string{"2024-03-31T00:00:00Z", "2024-05-31T00:00:00Z"}},
		{"0 0 29 2 *", "2024-03-01T00:00:00Z", []string{"2028-02-29T00:00:00Z"}},
		{"0 0 29 2 *", "2097-01-01T00:00:00Z", []string{"2104-02-29T00:00:00Z"}}, // 2100 is not a leap year
		// Both day fields count when one is a stepped star: rare days, years
		// apart (Feb 29 on Sun/Tue/Thu/Sat, Jan 1 on a Sunday).
		{"0 0 29 2 */2", "2004-02-29T00:00:00Z", []string{"2020-02-29T00:00:00Z", "2024-02-29T00:00:00Z"}},
		{"0 0 */31 1 */7", "2023-01-01T00:00:00Z", []string{"2034-01-01T00:00:00Z"}},
		{"0 0 29 2 */7", "2004-02-29T00:00:00Z", []string{"2032-02-29T00:00:00Z"}},
		{"0 0 29 2 */7", "2088-03-01T00:00:00Z", []string{"2128-02-29T00:00:00Z"}}, // 40 years: 2100 is no leap year
		// Parsed although no tick falls in the decade after 2000 (Jan 1 on a
		// Friday, Feb 1 on a Monday).
		{"0 0 */31 1 FRI", "2024-01-01T00:00:00Z", []string{"2027-01-01T00:00:00Z"}},
		{"0 0 */31 2 MON", "2010-02-01T00:00:00Z", []string{"2016-02-01T00:00:00Z"}},
		// Both day fields restricted: either matches (the 13th, or a Friday).
		{"0 0 13 * FRI", "2024-09-01T00:00:00Z", []string{"2024-09-06T00:00:00Z", "2024-09-13T00:00:00Z", "2024-09-20T00:00:00Z"}},
		// One day field a star: both must match (Friday the 13th).
		{"0 0 13 * *", "2024-09-01T00:00:00Z", []string{"2024-09-13T00:00:00Z"}},
		{"0 0 */1 * FRI", "2024-09-01T00:00:00Z", []string{"2024-09-06T00:00:00Z", "2024-09-13T00:00:00Z"}},
		{"0 0 ? * FRI", "2024-09-01T00:00:00Z", []string{"2024-09-06T00:00:00Z"}},
		// Seconds field.
		{"*/10 * * * * *", "2024-01-01T00:00:05Z", []string{"2024-01-01T00:00:10Z", "2024-01-01T00:00:20Z"}},
		{"30 0 0 * * *", "2024-01-01T00:00:30Z", []string{"2024-01-02T00:00:30Z"}},
		{"0 0 0 1 1 *", "2024-01-01T00:00:00.5Z", []string{"2025-01-01T00:00:00Z"}},
		{"* * * * * *", "2024-01-01T00:00:00.5Z", []string{"2024-01-01T00:00:01Z", "2024-01-01T00:00:02Z"}},
		// Descriptors.
		{"@hourly", "2024-01-01T00:30:00Z", []string{"2024-01-01T01:00:00Z"}},
		{"@daily", "2024-01-01T00:30:00Z", []string{"2024-01-02T00:00:00Z"}},
		{"@midnight", "2024-01-01T00:30:00Z", []string{"2024-01-02T00:00:00Z"}},
		{"@weekly", "2024-01-01T00:30:00Z", []string{"2024-01-07T00:00:00Z"}},
		{"@monthly", "2024-01-15T00:00:00Z", []string{"2024-02-01T00:00:00Z"}},
		{"@yearly", "2024-01-15T00:00:00Z", []string{"2025-01-01T00:00:00Z"}},
		{"@annually", "2024-01-15T00:00:00Z", []string{"2025-01-01T00:00:00Z"}},
		{"@DAILY", "2024-01-01T00:30:00Z", []string{"2024-01-02T00:00:00Z"}},
		// @every: multiples of the interval, aligned to UTC midnight.
		{"@every 15m", "2024-01-01T10:07:00Z", []string{"2024-01-01T10:15:00Z", "2024-01-01T10:30:00Z"}},
		{"@every 200ms", "2024-01-01T10:00:00.100Z", []string{"2024-01-01T10:00:00.2Z", "2024-01-01T10:00:00.4Z"}},
		{"@every 200ms", "2024-01-01T10:00:00.2Z", []string{"2024-01-01T10:00:00.4Z"}},
		{"@every 1h30m", "2024-01-01T00:00:00Z", []string{"2024-01-01T01:30:00Z", "2024-01-01T03:00:00Z"}},
		{"  @every   1s ", "2024-01-01T00:00:00Z", []string{"2024-01-01T00:00:01Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.expr+"/"+tt.from, func(t *testing.T) {
			x, err := Parse(tt.expr)
			if err != nil {
				t.Fatal(err)
			}
			at := utc(tt.from)
			for i, w := range tt.want {
				got := x.Next(at)
				if !got.Equal(utc(w)) {
					t.Fatalf("tick %d after %v = %v, want %v", i, at, got, w)
				}
				if got.Location() != time.UTC {
					t.Fatalf("location %v", got.Location())
				}
				at = got
			}
		})
	}
}

func TestNextInLocation(t *testing.T) {
	t.Parallel()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	lordHowe, err := time.LoadLocation("Australia/Lord_Howe")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		expr string
		loc  *time.Location
		from string
		want []string // UTC
	}{
		{"tokyo 9am", "0 9 * * *", tokyo, "2024-01-01T00:00:00Z", []string{"2024-01-02T00:00:00Z"}},
		// 2024-03-10 02:00 EST → 03:00 EDT: 02:30 does not exist that day.
		{"spring forward skips", "30 2 * * *", ny, "2024-03-09T12:00:00Z", []string{"2024-03-11T06:30:00Z"}},
		{"spring forward hourly", "0 * * * *", ny, "2024-03-10T06:30:00Z", []string{"2024-03-10T07:00:00Z", "2024-03-10T08:00:00Z"}},
		// 2024-11-03 02:00 EDT → 01:00 EST: 01:30 happens twice, fires once.
		{"fall back once", "30 1 * * *", ny, "2024-11-03T04:00:00Z", []string{"2024-11-03T05:30:00Z", "2024-11-04T06:30:00Z"}},
		{"fall back hourly", "0 * * * *", ny, "2024-11-03T04:30:00Z", []string{"2024-11-03T05:00:00Z", "2024-11-03T07:00:00Z", "2024-11-03T08:00:00Z"}},
		// Asked from inside the repeated hour (a scheduler that starts at
		// 01:10 EST, or a job replaced then): 01:30 already fired at EDT.
		{"fall back from repeated hour", "30 1 * * *", ny, "2024-11-03T06:10:00Z", []string{"2024-11-04T06:30:00Z"}},
		{"fall back minutes from repeated hour", "*/5 * * * *", ny, "2024-11-03T06:10:00Z", []string{"2024-11-03T07:00:00Z"}},
		// 2024-10-27 03:00 CEST → 02:00 CET: east of UTC too, the first
		// 02:30 (CEST) fires and the second does not.
		{"fall back east of UTC", "30 2 * * *", paris, "2024-10-26T22:00:00Z", []string{"2024-10-27T00:30:00Z", "2024-10-28T01:30:00Z"}},
		{"fall back east of UTC from repeated hour", "30 2 * * *", paris, "2024-10-27T01:10:00Z", []string{"2024-10-28T01:30:00Z"}},
		{"fall back east of UTC minutes", "*/30 * * * *", paris, "2024-10-26T23:50:00Z", []string{"2024-10-27T00:00:00Z", "2024-10-27T00:30:00Z", "2024-10-27T02:00:00Z"}},
		// Lord Howe falls back by 30 minutes (02:00 +11 → 01:30 +1030).
		{"half-hour fall back", "45 1 * * *", lordHowe, "2024-04-06T14:00:00Z", []string{"2024-04-06T14:45:00Z", "2024-04-07T15:15:00Z"}},
		{"half-hour fall back from repeated half hour", "45 1 * * *", lordHowe, "2024-04-06T15:05:00Z", []string{"2024-04-07T15:15:00Z"}},
		{"every ignores zone", "@every 1h", tokyo, "2024-01-01T00:30:00Z", []string{"2024-01-01T01:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := ParseInLocation(tt.expr, tt.loc)
			if err != nil {
				t.Fatal(err)
			}
			at := utc(tt.from)
			for i, w := range tt.want {
				got := x.Next(at)
				if !got.Equal(utc(w)) {
					t.Fatalf("tick %d after %v = %v (%v), want %v", i, at, got.UTC(), got, w)
				}
				if got.Location() != tt.loc {
					t.Fatalf("location %v, want %v", got.Location(), tt.loc)
				}
				at = got
			}
		})
	}
}

// TestNextAcrossDSTChanges checks every 2024 DST change of a few zones:
// the ticks that Next yields one after another fire each existing matching
// wall time once, at its first instant, and Next asked from any time in
// between agrees with them (a scheduler that starts mid-change computes
// the same ticks as one that ran through it).
func TestNextAcrossDSTChanges(t *testing.T) {
	t.Parallel()
	exprs := []string{"* * * * *", "*/5 * * * *", "0 * * * *", "30 1 * * *", "30 2 * * *", "45 1 * * *", "15,45 0-3 * * *", "*/20 * * * * *"}
	for _, zone := range []string{"America/New_York", "Europe/Paris", "Australia/Sydney", "Australia/Lord_Howe"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		var changes []time.Time
		for at := time.Date(2024, 1, 1, 0, 0, 0, 0, loc); ; {
			_, end := at.ZoneBounds()
			if end.IsZero() || end.Year() > 2024 {
				break
			}
			changes = append(changes, end)
			at = end
		}
		if len(changes) != 2 {
			t.Fatalf("%s: %d DST changes in 2024", zone, len(changes))
		}
		for _, change := range changes {
			from, to := change.Add(-4*time.Hour), change.Add(4*time.Hour)
			for _, expr := range exprs {
				x, err := ParseInLocation(expr, loc)
				if err != nil {
					t.Fatal(err)
				}
				name := zone + " " + change.Format(time.RFC3339) + " " + expr
				var ticks []time.Time
				walls := map[string]bool{}
				for tick := x.Next(from); tick.Before(to); tick = x.Next(tick) {
					wall := tick.Format("2006-01-02 15:04:05")
					if !x.matches(tick) || walls[wall] {
						t.Fatalf("%s: tick %v does not match or repeats a wall time", name, tick)
					}
					walls[wall] = true
					ticks = append(ticks, tick)
				}
				// Every matching instant is a tick, or a later instant of
				// a wall time that fired.
				step := time.Minute
				if x.second != 1 {
					step = time.Second
				}
				for m := from.Truncate(step).Add(step); m.Before(to); m = m.Add(step) {
					if x.matches(m) && !slices.ContainsFunc(ticks, m.Equal) && !walls[m.In(loc).Format("2006-01-02 15:04:05")] {
						t.Fatalf("%s: %v matches but never fires", name, m.In(loc))
					}
				}
				// Next from anywhere is the first tick after it.
				for p := from; p.Before(to); p = p.Add(97 * time.Second) {
					i := sort.Search(len(ticks), func(i int) bool { return ticks[i].After(p) })
					if i == len(ticks) {
						break
					}
					if got := x.Next(p); !got.Equal(ticks[i]) {
						t.Fatalf("%s: Next(%v) = %v, want %v", name, p.In(loc), got, ticks[i])
					}
				}
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	bad := []string{
		"",
		"   ",
		"* * * *",
		"* * * * * * *",
		"60 * * * *",
		"* 24 * * *",
		"* * 0 * *",
		"* * 32 * *",
		"* * * 0 *",
		"* * * 13 *",
		"* * * * 8",
		"-1 * * * *",
		"+1 * * * *",
		"1.5 * * * *",
		"5-1 * * * *",
		"*/0 * * * *",
		"*/61 * * * *",
		"1-2-3 * * * *",
		"1/2/3 * * * *",
		"a * * * *",
		"1,,2 * * * *",
		",1 * * * *",
		"* * * FOO *",
		"* * * * MONDAY",
		"? * * * *",    // '?' only in the day fields
		"* * * ? *",    // nor in month
		"0 0 30 2 *",   // never fires
		"0 0 31 4,6 *", // never fires
		"00000 * * * *",
		"@every",
		"@every 0s",
		"@every -1s",
		"@every 10ms",
		"@every banana",
		"@fortnightly",
		"@daily 5",
		"@",
		"L * * * *",
		"0 0 1W * *",
		"0 0 * * 5#3",
		strings.Repeat("1,", 200) + "1 * * * *",
		"* * * * *\x00",
	}
	for _, expr := range bad {
		t.Run(expr, func(t *testing.T) {
			x, err := Parse(expr)
			if err == nil {
				t.Fatalf("Parse(%q) = %v, want error", expr, x)
			}
			if !errors.Is(err, ErrInvalidExpression) {
				t.Fatalf("error %v does not wrap ErrInvalidExpression", err)
			}
		})
	}
}

// TestNextBruteForce compares Next with a minute-by-minute scan for random
// five-field expressions.
func TestNextBruteForce(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	field := func(lo, hi int) string {
		switch r.IntN(5) {
		case 0:
			return "*"
		case 1:
			return itoa(lo + r.IntN(hi-lo+1))
		case 2:
			a := lo + r.IntN(hi-lo+1)
			b := a + r.IntN(hi-a+1)
			return itoa(a) + "-" + itoa(b)
		case 3:
			return "*/" + itoa(1+r.IntN(hi-lo+1))
		default:
			return itoa(lo+r.IntN(hi-lo+1)) + "," + itoa(lo+r.IntN(hi-lo+1))
		}
	}
	compared := 0
	for i := 0; i < 2000; i++ {
		expr := strings.Join([]string{field(0, 59), field(0, 23), field(1, 31), field(1, 12), field(0, 6)}, " ")
		x, err := Parse(expr)
		if err != nil {
			continue // never fires
		}
		from := time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(r.Int64N(int64(365 * 24 * time.Hour))))
		got := x.Next(from)
		want := time.Time{}
		// Scan at most two years of minutes.
		for m := from.Truncate(time.Minute).Add(time.Minute); m.Before(from.AddDate(2, 0, 0)); {
			switch {
			case x.month&(1<<uint(m.Month())) == 0 || !x.dayMatches(m):
				m = time.Date(m.Year(), m.Month(), m.Day()+1, 0, 0, 0, 0, time.UTC) // skip the day
				continue
			case x.hour&(1<<uint(m.Hour())) == 0:
				m = m.Truncate(time.Hour).Add(time.Hour)
				continue
			case x.matches(m):
				want = m
			default:
				m = m.Add(time.Minute)
				continue
			}
			break
		}
		if want.IsZero() {
			continue // rarer than the scan window
		}
		if !got.Equal(want) {
			t.Fatalf("%q after %v: Next = %v, scan = %v", expr, from, got, want)
		}
		compared++
	}
	if compared < 1000 {
		t.Fatalf("only %d of 2000 expressions compared", compared)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// matches reports whether t (in x's location) is a tick of a field
// expression.
func (x *Expression) matches(t time.Time) bool {
	t = t.In(x.loc)
	return t.Nanosecond() == 0 &&
		x.second&(1<<uint(t.Second())) != 0 &&
		x.minute&(1<<uint(t.Minute())) != 0 &&
		x.hour&(1<<uint(t.Hour())) != 0 &&
		x.month&(1<<uint(t.Month())) != 0 &&
		x.dayMatches(t)
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"* * * * *", "*/15 0-6,22 1,15 JAN-JUN MON-FRI", "0 0 29 2 *", "*/7 * * * * *",
		"@every 1h30m", "@daily", "0 0 13 * FRI", "5/20 * * * *", "0 0 * * 7", "? ? ? ? ?", "@every 100ms",
		"0 0 29 2 */2", "0 0 */31 1 FRI",
	} {
		f.Add(s, int64(1700000000), "UTC")
		f.Add(s, int64(1710054000), "America/New_York")
	}
	zones := map[string]*time.Location{"UTC": time.UTC}
	for _, z := range []string{"America/New_York", "Asia/Kolkata", "Australia/Lord_Howe", "Europe/Paris"} {
		if l, err := time.LoadLocation(z); err == nil {
			zones[z] = l
		}
	}
	f.Fuzz(func(t *testing.T, expr string, unix int64, zone string) {
		loc := zones[zone]
		if loc == nil {
			loc = time.UTC
		}
		x, err := ParseInLocation(expr, loc)
		if err != nil {
			if !errors.Is(err, ErrInvalidExpression) {
				t.Fatalf("error %v does not wrap ErrInvalidExpression", err)
			}
			return
		}
		// Years 1970-2400, any nanosecond.
		u := uint64(unix)
		after := time.Unix(int64(u%(430*365*24*3600)), int64(u>>34)%int64(time.Second))
		next := x.Next(after)
		if next.IsZero() {
			t.Fatalf("%q never fires after %v", expr, after)
		}
		if !next.After(after) {
			t.Fatalf("%q: Next(%v) = %v is not after it", expr, after, next)
		}
		if x.every == 0 && !x.matches(next) {
			t.Fatalf("%q: Next(%v) = %v does not match the fields", expr, after, next)
		}
		// Next from any time before a tick is that tick: schedulers that
		// start at different times compute the same ticks.
		if mid := after.Add(next.Sub(after) / 2); !x.Next(mid).Equal(next) {
			t.Fatalf("%q: Next(%v) = %v, but Next(%v) = %v", expr, after, next, mid, x.Next(mid))
		}
		if again := x.Next(next); !again.After(next) {
			t.Fatalf("%q: Next(%v) = %v is not after it", expr, next, again)
		}
	})
}

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("*/15 0-6,22 1,15 JAN-JUN MON-FRI"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNext(b *testing.B) {
	for _, expr := range []string{"* * * * *", "0 9 * * MON-FRI", "0 0 29 2 *", "@every 200ms"} {
		b.Run("expr="+expr, func(b *testing.B) {
			x, err := Parse(expr)
			if err != nil {
				b.Fatal(err)
			}
			at := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
			b.ReportAllocs()
			for b.Loop() {
				at = x.Next(at)
				if at.Year() > 2400 {
					at = time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
				}
			}
		})
	}
}
