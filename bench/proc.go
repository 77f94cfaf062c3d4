package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Memory and load figures come from Linux's /proc. They cover the whole
// process: the embedded nats-server, the grains, the provider, the tool and
// the bench's own client all live in it.

// statusField returns field (e.g. "VmHWM") of a /proc/<pid>/status
// document in bytes. The kernel writes such lines as "VmHWM:\t  123456 kB".
func statusField(status []byte, field string) (int64, error) {
	for line := range bytes.Lines(status) {
		name, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok || string(name) != field {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 || len(f) > 2 {
			return 0, fmt.Errorf("bench: status field %s: %q", field, bytes.TrimSpace(rest))
		}
		n, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil || n < 0 || n > 1<<53 {
			return 0, fmt.Errorf("bench: status field %s: %q is not a size", field, f[0])
		}
		mult := int64(1)
		if len(f) == 2 {
			switch string(f[1]) {
			case "kB":
				mult = 1024
			default:
				return 0, fmt.Errorf("bench: status field %s: unit %q", field, f[1])
			}
		}
		return n * mult, nil
	}
	return 0, fmt.Errorf("bench: status field %s missing", field)
}

func readStatus(field string) (int64, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoProcStatus, err)
	}
	return statusField(data, field)
}

// rss is the process's resident set size now, in bytes.
func rss() (int64, error) { return readStatus("VmRSS") }

// peakRSS is the process's peak resident set size (VmHWM) in bytes: since
// the last [resetPeakRSS], or since the process started.
func peakRSS() (int64, error) { return readStatus("VmHWM") }

// resetPeakRSS sets VmHWM back to the current RSS (Linux ≥ 4.0); it
// reports whether that worked.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// LoadAvg is the system load average over 1, 5 and 15 minutes.
type LoadAvg [3]float64

// String is "1m 5m 15m" with two decimals.
func (l LoadAvg) String() string { return fmt.Sprintf("%.2f %.2f %.2f", l[0], l[1], l[2]) }

// parseLoadAvg reads the first three fields of /proc/loadavg.
func parseLoadAvg(data []byte) (LoadAvg, error) {
	f := bytes.Fields(data)
	if len(f) < 3 {
		return LoadAvg{}, fmt.Errorf("bench: loadavg %q", data)
	}
	var l LoadAvg
	for i := range l {
		v, err := strconv.ParseFloat(string(f[i]), 64)
		if err != nil || v < 0 || v != v || v > 1e9 {
			return LoadAvg{}, fmt.Errorf("bench: loadavg field %d %q", i, f[i])
		}
		l[i] = v
	}
	return l, nil
}

func loadAvg() (LoadAvg, error) {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return LoadAvg{}, fmt.Errorf("%w: %v", ErrNoProcStatus, err)
	}
	return parseLoadAvg(data)
}
