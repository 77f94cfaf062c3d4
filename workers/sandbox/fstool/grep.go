package fstool

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"regexp"
	"regexp/syntax"
	"strings"
)

func (t *tools) grep(ctx context.Context, req GrepRequest) (GrepResult, error) {
	re, err := compileRegexp(req.Pattern, req.IgnoreCase)
	if err != nil {
		return GrepResult{}, err
	}
	insts := 1 // a literal is found with a byte search
	if _, complete := re.LiteralPrefix(); !complete {
		insts = progSize(req.Pattern, req.IgnoreCase)
	}
	var filter *glob
	if req.Glob != "" {
		if filter, err = compileGlob(req.Glob); err != nil {
			return GrepResult{}, err
		}
	}
	// The whole-file pre-check: with (?m), ^ and $ match at line ends, so
	// a file where no line matches is skipped with one scan. Expressions
	// whose meaning (?m) could change (\A, \z, their own flags) go line
	// by line only.
	var pre *regexp.Regexp
	if !strings.Contains(req.Pattern, `\A`) && !strings.Contains(req.Pattern, `\z`) && !strings.Contains(req.Pattern, "(?") {
		pre, _ = compileRegexp("(?m)"+req.Pattern, req.IgnoreCase)
	}
	limit := req.MaxResults
	if limit == 0 {
		limit = DefaultGrepResults
	}
	limit = min(limit, t.o.maxGrepResults)
	return call(ctx, t, "grep", req.Path, func(w *workdir, base string) (GrepResult, error) {
		info, _, err := w.lstat(base)
		if err != nil {
			return GrepResult{}, err
		}
		s := &search{t: t, w: w, re: re, pre: pre, insts: insts, limit: limit, res: GrepResult{Matches: []GrepMatch{}}}
		if !info.IsDir() {
			// One file, named explicitly: the glob does not apply.
			if !info.Mode().IsRegular() {
				return GrepResult{}, invalid("%.256q is not a regular file", base)
			}
			if info.Size() > t.o.maxGrepFileBytes {
				return GrepResult{}, invalid("%.256q is %d bytes, more than the %d fs::grep searches", base, info.Size(), t.o.maxGrepFileBytes)
			}
			_, err := s.file(ctx, base, info)
			return s.res, err
		}
		k := newWalker(w, &t.o)
		prefix := len(base) + 1
		if base == "." {
			prefix = 0
		}
		err = walk(ctx, k, base, struct{}{}, func(rel string, d fs.DirEntry, _ struct{}) (struct{}, bool, bool) {
			if d.IsDir() {
				return struct{}{}, true, false
			}
			if !d.Type().IsRegular() { // symlinks, devices, sockets, FIFOs
				return struct{}{}, false, false
			}
			if filter != nil {
				name := rel[prefix:]
				if !strings.Contains(req.Glob, "/") {
					name = d.Name()
				}
				if !filter.match(name) {
					return struct{}{}, false, false
				}
			}
			fi, err := d.Info()
			if err != nil {
				s.unsearched(rel, err)
				return struct{}{}, false, false
			}
			stop, err := s.file(ctx, rel, fi)
			if err != nil {
				if ctx.Err() != nil {
					return struct{}{}, false, true
				}
				// An unreadable file is skipped, and the answer says so.
				s.unsearched(rel, err)
			}
			return struct{}{}, false, stop
		})
		if err != nil {
			return GrepResult{}, err
		}
		if e := ctxErr(ctx); e != nil {
			return GrepResult{}, e
		}
		s.res.Truncated = s.res.Truncated || k.truncated
		return s.res, nil
	})
}

// Bounds of the matching work of fs::grep, in program instructions times
// bytes (up to some 15 ns each): one match call, which cannot be stopped
// (half a second at worst), and the work between two looks at the
// caller's clock.
const (
	maxMatchCost = 1 << 25
	ctxCheckCost = 1 << 22
)

// progSize is the number of instructions of pattern's program (what
// compileRegexp accepted compiles), the cost per byte of a match at
// worst.
func progSize(pattern string, ignoreCase bool) int {
	flags := syntax.Perl
	if ignoreCase {
		flags |= syntax.FoldCase
	}
	re, err := syntax.Parse(pattern, flags)
	if err != nil {
		return 1
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 1
	}
	return max(len(prog.Inst), 1)
}

// search is one fs::grep call's progress.
type search struct {
	t     *tools
	w     *workdir
	re    *regexp.Regexp
	pre   *regexp.Regexp // nil: no whole-file pre-check
	insts int            // the expression's program size: a match costs up to insts per byte
	limit int
	size  int
	buf   []byte
	res   GrepResult
}

// file searches the file rel; it returns true when the answer is full.
// Binary files are not searched, as the doc says; a text file larger
// than the bound, or one that grew while it was read, is not searched
// either but named in the answer ([search.skip]).
func (s *search) file(ctx context.Context, rel string, info fs.FileInfo) (stop bool, err error) {
	if err := ctx.Err(); err != nil {
		return true, err
	}
	f, err := s.w.openRegular(rel, info)
	if err != nil {
		return false, err
	}
	// One buffer serves every file of the search. Of a file over the
	// bound only the head is read: it says whether the file is binary
	// (skipped quietly, as every binary file) or text the answer must
	// name. A file larger than its Lstat said is being written: it is
	// named too.
	over := info.Size() > s.t.o.maxGrepFileBytes
	want := int(min(info.Size(), s.t.o.maxGrepFileBytes)) + 1
	if over {
		want = int(min(info.Size(), sniffBytes))
	}
	if cap(s.buf) < want {
		s.buf = make([]byte, want)
	}
	n, err := io.ReadFull(f, s.buf[:want])
	_ = f.Close()
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return false, err
	}
	data := s.buf[:n]
	head := data[:min(n, sniffBytes)]
	if isBinary(head, n > len(head) || int64(n) < info.Size()) {
		return false, nil
	}
	if over || n == want {
		s.skip(rel)
		return false, nil
	}
	// A match cannot be stopped, and an expression costs up to its
	// program size per byte ("(?:\w+\s?){1000}z" takes a minute per MiB
	// of one line): the whole-file pre-check runs only when it is cheap,
	// the lines are matched with a look at the caller's clock between
	// them, and a line too long to match within maxMatchCost leaves the
	// file unsearched (named, as a file over the size bound).
	if s.pre != nil && int64(len(data))*int64(s.insts) <= maxMatchCost && !s.pre.Match(data) {
		return false, nil
	}
	var spent int64 // cost since the last look at the clock
	for n := 1; len(data) > 0; n++ {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		work := int64(len(line)+1) * int64(s.insts)
		if work > maxMatchCost {
			s.skip(rel)
			return false, nil
		}
		if spent += work; spent > ctxCheckCost {
			if err := ctx.Err(); err != nil {
				return true, err
			}
			spent = 0
		}
		if !s.re.Match(line) {
			continue
		}
		if len(s.res.Matches) == s.limit {
			s.res.Truncated = true
			return true, nil
		}
		text, cut := cutLine(validText(line), DefaultGrepLineBytes)
		m := GrepMatch{Path: validName(rel), Line: n, Text: string(text)}
		if cut {
			m.Text += LineCutMarker
		}
		// Path, text and some room for the field names and the number.
		cost := len(m.Path) + len(m.Text) + 40
		if s.size+cost > s.t.o.maxAnswerBytes {
			s.res.Truncated = true
			return true, nil
		}
		s.size += cost
		s.res.Matches = append(s.res.Matches, m)
	}
	return false, nil
}

// unsearched records a file the walk found but could not search: one
// removed meanwhile is no loss, any other is named ([search.skip]).
func (s *search) unsearched(rel string, err error) {
	if !errors.Is(err, fs.ErrNotExist) {
		s.skip(rel)
	}
}

// skip records a text file fs::grep did not search: the answer says
// truncated (a match may be in it) and counts it in skipped_files, and
// names it in skipped while fewer than [MaxGrepSkipped] are named and the
// name fits the answer's byte bound.
func (s *search) skip(rel string) {
	s.res.Truncated = true
	s.res.SkippedFiles++
	name := validName(rel)
	cost := len(name) + 4 // quotes and a comma, with room to spare
	if len(s.res.Skipped) < MaxGrepSkipped && s.size+cost <= s.t.o.maxAnswerBytes {
		s.size += cost
		s.res.Skipped = append(s.res.Skipped, name)
	}
}
