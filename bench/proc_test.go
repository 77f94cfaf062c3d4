package bench

import (
	"errors"
	"runtime"
	"testing"
)

const status = "Name:\tbench.test\nVmPeak:\t 1234 kB\nVmHWM:\t   90112 kB\nVmRSS:\t   80000 kB\nThreads:\t12\n"

func TestStatusField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		doc, field string
		want       int64
		ok         bool
	}{
		{status, "VmHWM", 90112 << 10, true},
		{status, "VmRSS", 80000 << 10, true},
		{status, "Threads", 12, true},
		{status, "VmSwap", 0, false},
		{"VmHWM:\n", "VmHWM", 0, false},
		{"VmHWM: x kB\n", "VmHWM", 0, false},
		{"VmHWM: 12 MB\n", "VmHWM", 0, false},
		{"VmHWM: -1 kB\n", "VmHWM", 0, false},
		{"VmHWM: 1 kB extra\n", "VmHWM", 0, false},
		{"VmHWM: 99999999999999999999 kB\n", "VmHWM", 0, false},
		{"", "VmHWM", 0, false},
	}
	for _, tt := range tests {
		got, err := statusField([]byte(tt.doc), tt.field)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("statusField(%q, %s) = %d, %v; want %d, ok %v", tt.doc, tt.field, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseLoadAvg(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want LoadAvg
		ok   bool
	}{
		{"0.47 0.41 1.35 2/83 23187\n", LoadAvg{0.47, 0.41, 1.35}, true},
		{"1 2 3", LoadAvg{1, 2, 3}, true},
		{"1 2", LoadAvg{}, false},
		{"a b c", LoadAvg{}, false},
		{"-1 0 0", LoadAvg{}, false},
		{"NaN 0 0", LoadAvg{}, false},
		{"", LoadAvg{}, false},
	}
	for _, tt := range tests {
		got, err := parseLoadAvg([]byte(tt.in))
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseLoadAvg(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestProcReaders(t *testing.T) {
	t.Parallel()
	r, err := rss()
	if runtime.GOOS != "linux" {
		if !errors.Is(err, ErrNoProcStatus) {
			t.Fatalf("rss() without /proc = %d, %v", r, err)
		}
		return
	}
	p, err := peakRSS()
	if err != nil || r <= 0 || p < r/2 {
		t.Fatalf("rss %d, peak %d, %v", r, p, err)
	}
	if _, err := loadAvg(); err != nil {
		t.Fatal(err)
	}
}

func FuzzStatusField(f *testing.F) {
	f.Add([]byte(status), "VmHWM")
	f.Add([]byte("VmRSS: 1 kB"), "VmRSS")
	f.Add([]byte(":::\n\n:"), "")
	f.Fuzz(func(t *testing.T, doc []byte, field string) {
		n, err := statusField(doc, field)
		if err == nil && n < 0 {
			t.Fatalf("negative size %d", n)
		}
		if err != nil && n != 0 {
			t.Fatalf("size %d with error %v", n, err)
		}
	})
}

func FuzzParseLoadAvg(f *testing.F) {
	f.Add([]byte("0.47 0.41 1.35 2/83 23187\n"))
	f.Add([]byte("1e400 1 1"))
	f.Fuzz(func(t *testing.T, in []byte) {
		l, err := parseLoadAvg(in)
		if err != nil {
			return
		}
		for _, v := range l {
			if v < 0 || v != v {
				t.Fatalf("bad load %v from %q", l, in)
			}
		}
	})
}
