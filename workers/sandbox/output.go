package sandbox

// capWriter keeps the first max bytes written to it and counts the rest,
// which it discards: a command's output flood costs time, never memory.
type capWriter struct {
	buf   []byte
	max   int
	total int64
}

// Write never fails, so the copy from the pipe drains it to the end.
func (w *capWriter) Write(p []byte) (int, error) {
	w.total += int64(len(p))
	if room := w.max - len(w.buf); room > 0 {
		w.buf = append(w.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// truncated reports whether anything was discarded.
func (w *capWriter) truncated() bool { return w.total > int64(len(w.buf)) }
