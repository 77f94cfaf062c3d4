package fstool

import (
	"context"
	"strings"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/internal/answer"
	"github.com/iii-on-nats/iii/workers/sandbox/internal/fit"
)

// sizer holds answers to the room the max payload leaves them in the
// caller's codec. The raw-byte bounds ([WithMaxAnswerBytes]) do not: a
// JSON caller gets each control character as a six-byte escape, and a
// server may allow less than the bounds.
type sizer struct {
	codec wire.Codec
	limit int64
}

// fits reports whether v encodes within the limit.
func (s sizer) fits(v any) bool {
	b, err := s.codec.Marshal(v)
	return err == nil && int64(len(b)) <= s.limit
}

// errTooLarge is the answer that cannot be cut to fit: the fields around
// its lists alone are too large.
var errTooLarge = wire.Errorf(wire.CodeInternal, "the answer does not fit the server's max payload")

// fitted adapts fn like engine.Typed, then cuts its answer with cut to
// fit the max payload in the request's codec.
func fitted[Req, Resp any](t *tools, fn func(context.Context, Req) (Resp, error), cut func(Resp, sizer) (Resp, error)) engine.Handler {
	return func(ctx context.Context, r *engine.Request) (any, error) {
		var req Req
		if err := r.Bind(&req); err != nil {
			return nil, err
		}
		res, err := fn(ctx, req)
		if err != nil {
			return nil, err
		}
		return cut(res, sizer{codec: r.Codec, limit: t.o.maxPayload.MaxPayload() - answer.Headroom})
	}
}

// fitSlack covers what the content's encoding alone does not: the longer
// string header of msgpack, a shorter lines_read.
const fitSlack = 64

// fitRead cuts the content of an fs::read answer to whole lines that fit;
// a first line that does not fit alone is cut and marked with
// [LineCutMarker], so a reader paging by offset always moves on.
func fitRead(res ReadResult, s sizer) (ReadResult, error) {
	if s.fits(res) {
		return res, nil
	}
	content := res.Content
	res.Content, res.Truncated = "", true
	base, err := s.codec.Marshal(res)
	if err != nil {
		return ReadResult{}, wire.Wrap(wire.CodeInternal, err, "encode the answer")
	}
	room := s.limit - int64(len(base)) - fitSlack
	size := fit.StringSize(s.codec)
	p := fit.Prefix(content, room, size)
	if len(p) < len(content) && content[len(p)] != '\n' {
		if i := strings.LastIndexByte(p, '\n'); i >= 0 {
			p = p[:i]
		} else if p = fit.Prefix(content, room-size(LineCutMarker), size); p != "" {
			p += LineCutMarker
		}
	}
	res.Content, res.LinesRead = p, 0
	if p != "" {
		res.LinesRead = strings.Count(p, "\n") + 1
	}
	if !s.fits(res) {
		return ReadResult{}, errTooLarge
	}
	return res, nil
}

// fitItems cuts *items, a list of the answer *res, to its longest prefix
// with which the answer fits (maybe none); it reports whether it cut.
func fitItems[R, T any](s sizer, res *R, items *[]T) bool {
	all := *items
	n := fit.Longest(len(all), func(k int) bool {
		*items = all[:k]
		return s.fits(*res)
	})
	*items = all[:n]
	return n < len(all)
}

// fitGrep cuts the matches of an fs::grep answer, then (when none fit)
// the names of skipped files; skipped_files still counts them all.
func fitGrep(res GrepResult, s sizer) (GrepResult, error) {
	if s.fits(res) {
		return res, nil
	}
	res.Truncated = true
	if fitItems(s, &res, &res.Matches); len(res.Matches) == 0 && !s.fits(res) {
		if fitItems(s, &res, &res.Skipped); len(res.Skipped) == 0 {
			res.Skipped = nil
		}
	}
	if !s.fits(res) {
		return GrepResult{}, errTooLarge
	}
	return res, nil
}

// fitLs cuts the entries of an fs::ls answer.
func fitLs(res LsResult, s sizer) (LsResult, error) {
	if s.fits(res) {
		return res, nil
	}
	res.Truncated = true
	if fitItems(s, &res, &res.Entries); !s.fits(res) {
		return LsResult{}, errTooLarge
	}
	return res, nil
}

// fitGlob cuts the matches of an fs::glob answer.
func fitGlob(res GlobResult, s sizer) (GlobResult, error) {
	if s.fits(res) {
		return res, nil
	}
	res.Truncated = true
	if fitItems(s, &res, &res.Matches); !s.fits(res) {
		return GlobResult{}, errTooLarge
	}
	return res, nil
}
