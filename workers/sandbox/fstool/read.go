package fstool

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"unicode/utf8"
)

// sniffBytes is how much of a file decides whether it is binary.
const sniffBytes = 8 << 10

// LineCutMarker ends a line that fs::read or fs::grep cut to its bound.
const LineCutMarker = " [… line cut]"

// isBinary reports NUL bytes or invalid UTF-8 in head (the first bytes of
// a file; a rune cut by the end of head is not held against it).
func isBinary(head []byte, cut bool) bool {
	if bytes.IndexByte(head, 0) >= 0 {
		return true
	}
	if utf8.Valid(head) {
		return false
	}
	if !cut {
		return true
	}
	// Drop an incomplete rune at the end and look again.
	for i := 1; i < utf8.UTFMax && i <= len(head); i++ {
		if utf8.RuneStart(head[len(head)-i]) {
			return !utf8.Valid(head[:len(head)-i])
		}
	}
	return true
}

// validText is line as an answer can carry it: the binary check sees
// only the head of a file, so a later line may hold bytes that are not
// UTF-8, and a msgpack or JSON string must be valid UTF-8. Each run of
// invalid bytes becomes U+FFFD.
func validText(line []byte) []byte {
	if utf8.Valid(line) {
		return line
	}
	return bytes.ToValidUTF8(line, []byte("\uFFFD"))
}

// cutLine cuts line to at most n bytes at a rune boundary.
func cutLine(line []byte, n int) ([]byte, bool) {
	if len(line) <= n {
		return line, false
	}
	i := n
	for i > 0 && !utf8.RuneStart(line[i]) {
		i--
	}
	return line[:i], true
}

func (t *tools) read(ctx context.Context, req ReadRequest) (ReadResult, error) {
	return call(ctx, t, "read", req.Path, func(w *workdir, rel string) (ReadResult, error) {
		info, _, err := w.lstat(rel)
		if err != nil {
			return ReadResult{}, err
		}
		if info.IsDir() {
			return ReadResult{}, invalid("%.256q is a directory; list it with fs::ls", rel)
		}
		f, err := w.openRegular(rel, info)
		if err != nil {
			return ReadResult{}, err
		}
		defer f.Close()
		res := ReadResult{Path: rel, Size: info.Size()}
		err = t.readLines(ctx, f, req, &res)
		return res, err
	})
}

// readLines streams the file: it counts every line and formats those from
// offset for limit lines while the answer stays under its cap.
func (t *tools) readLines(ctx context.Context, f io.Reader, req ReadRequest, res *ReadResult) error {
	br := bufio.NewReaderSize(f, 4*sniffBytes)
	head, err := br.Peek(sniffBytes)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return err
	}
	if isBinary(head, len(head) == sniffBytes) {
		res.Binary = true
		return nil
	}
	first := max(req.Offset, 1)
	limit := req.Limit
	if limit == 0 {
		limit = DefaultReadLimit
	}
	var (
		out   bytes.Buffer
		line  []byte
		entry []byte
		full  bool // the answer reached its cap
		n     int  // lines seen
		reads int  // ReadSlice calls
	)
	for {
		frag, err := br.ReadSlice('\n')
		// Every so many reads, not lines: a file of one endless line
		// (a sparse file is cheap to make) must not outlive the call.
		if reads++; reads%1024 == 0 {
			if e := ctxErr(ctx); e != nil {
				return e
			}
		}
		if len(frag) == 0 && err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return err
		}
		want := n+1 >= first && res.LinesRead < limit && !full
		if want && len(line) <= t.o.maxLineBytes {
			// Keep one byte past the bound to know that the line is cut.
			line = append(line, frag[:min(len(frag), t.o.maxLineBytes+1-len(line))]...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		n++
		if want {
			line = bytes.TrimSuffix(line, []byte("\n"))
			// Replaced before the cut, so an incomplete rune kept at the
			// bound is cut away with the rest.
			text, cut := cutLine(validText(line), t.o.maxLineBytes)
			entry = appendNumbered(entry[:0], n, text)
			if cut {
				entry = append(entry, LineCutMarker...)
				res.Truncated = true
			}
			sep := 0
			if out.Len() > 0 {
				sep = 1
			}
			if out.Len()+sep+len(entry) > t.o.maxAnswerBytes {
				full = true
			} else {
				if sep == 1 {
					out.WriteByte('\n')
				}
				out.Write(entry)
				res.LinesRead++
			}
		}
		line = line[:0]
		if errors.Is(err, io.EOF) {
			break
		}
	}
	res.TotalLines = n
	res.Content = out.String()
	if first+res.LinesRead <= n {
		res.Truncated = true
	}
	return nil
}

// appendNumbered appends the line like cat -n: the number right-aligned in
// six columns, a tab, the text.
func appendNumbered(dst []byte, n int, text []byte) []byte {
	var num [20]byte
	digits := strconv.AppendInt(num[:0], int64(n), 10)
	for range 6 - len(digits) {
		dst = append(dst, ' ')
	}
	dst = append(dst, digits...)
	dst = append(dst, '\t')
	return append(dst, text...)
}
