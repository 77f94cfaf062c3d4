package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// Per-session stores and session homes (docs/REGIONS.md). A per-session
// stream (events, turn steps, session entries) has one subject per
// session, prefix + session id, and a per-session bucket one key (or key
// prefix) per session. The primary copy holds the sessions without a home
// region; each region that runs iii nodes (WithRegion) has its own copy,
// placed in that region's cluster, for the sessions "<region>.<name>".

// ErrUnknownRegion is returned (wrapped in a wire error with code
// not_found) for a session whose home region has no stores: no iii node
// ever ran there with that region.
var ErrUnknownRegion = errors.New("engine: the session's home region has no stores")

// Region is the region this engine's node belongs to ("" outside a
// supercluster): the region whose session stores the node's workers create.
func (e *Engine) Region() string { return e.opts.region }

// EnsureSessionStream ensures per-session stream cfg, whose subjects are
// prefix + session id: the primary copy (subject filter "<prefix>*"; a
// primary stream made by an older version with "<prefix>>" is narrowed to
// it, which captures the same subjects since ids had no dots) and, when the
// engine has a region, that region's copy. It returns the primary copy.
func (e *Engine) EnsureSessionStream(ctx context.Context, cfg jetstream.StreamConfig, prefix string) (jetstream.Stream, error) {
	cfg.Subjects = []string{subjects.SessionSubjects(prefix, "")}
	s, err := e.EnsureStream(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := e.narrow(ctx, s, prefix); err != nil {
		return nil, err
	}
	if r := e.opts.region; r != "" {
		if _, err := e.EnsureStream(ctx, regionalStream(cfg, prefix, r)); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// narrow replaces a primary stream's "<prefix>>" filter with "<prefix>*",
// so that regional copies (whose subjects have one more token) can exist.
func (e *Engine) narrow(ctx context.Context, s jetstream.Stream, prefix string) error {
	info := s.CachedInfo()
	wide := prefix + ">"
	if info == nil || !slices.Contains(info.Config.Subjects, wide) {
		return nil
	}
	cfg := info.Config
	cfg.Subjects = slices.Clone(cfg.Subjects)
	cfg.Subjects[slices.Index(cfg.Subjects, wide)] = subjects.SessionSubjects(prefix, "")
	err := ensure(ctx, e, func(ctx context.Context) error {
		_, err := e.js.UpdateStream(ctx, cfg)
		return err
	})
	if err != nil {
		return wire.Wrap(wire.CodeUnavailable, err, "narrow the subjects of stream %s", cfg.Name)
	}
	e.opts.logger.Info("stream subjects narrowed for regional session stores", "stream", cfg.Name, "from", wide, "to", cfg.Subjects)
	return nil
}

func regionalStream(cfg jetstream.StreamConfig, prefix, region string) jetstream.StreamConfig {
	cfg.Name = subjects.RegionalStream(cfg.Name, region)
	cfg.Subjects = []string{subjects.SessionSubjects(prefix, region)}
	cfg.Placement = &jetstream.Placement{Cluster: region}
	cfg.Description = strings.TrimSpace(cfg.Description + " (sessions homed in region " + region + ")")
	return cfg
}

// EnsureSessionKV ensures per-session bucket cfg: the primary copy and, when
// the engine has a region, that region's copy, placed in its cluster. It
// returns the primary copy.
func (e *Engine) EnsureSessionKV(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := e.EnsureKV(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if r := e.opts.region; r != "" {
		rc := cfg
		rc.Bucket = subjects.RegionalBucket(cfg.Bucket, r)
		rc.Placement = &jetstream.Placement{Cluster: r}
		rc.Description = strings.TrimSpace(cfg.Description + " (sessions homed in region " + r + ")")
		if _, err := e.EnsureKV(ctx, rc); err != nil {
			return nil, err
		}
	}
	return kv, nil
}

// SessionKV is the copy of per-session bucket that holds session sid's
// keys: the primary copy, or the one of sid's home region. A region with
// no copy is a not_found wire error wrapping [ErrUnknownRegion].
func (e *Engine) SessionKV(ctx context.Context, bucket, sid string) (jetstream.KeyValue, error) {
	kv, err := e.RegionKV(ctx, bucket, subjects.SessionRegion(sid))
	if err != nil {
		return nil, homedErr(err, sid, "bucket", subjects.SessionBucket(bucket, sid))
	}
	return kv, nil
}

// RegionKV is region's copy of per-session bucket ("" the primary copy),
// cached per process: what watchers and listings that cover every copy
// open for each region [Engine.SessionRegions] names. A region with no
// copy is a not_found wire error wrapping [ErrUnknownRegion].
func (e *Engine) RegionKV(ctx context.Context, bucket, region string) (jetstream.KeyValue, error) {
	name := subjects.RegionalBucket(bucket, region)
	kv, err := cached(e, e.kvs, name, func() (jetstream.KeyValue, error) { return e.js.KeyValue(ctx, name) })
	if err != nil {
		return nil, regionErr(err, region, "bucket", name)
	}
	return kv, nil
}

// cached is m[name] under e.mu, opened and remembered on first use (a
// failed open is not remembered).
func cached[T any](e *Engine, m map[string]T, name string, open func() (T, error)) (T, error) {
	e.mu.Lock()
	v, ok := m[name]
	e.mu.Unlock()
	if ok {
		return v, nil
	}
	v, err := open()
	if err != nil {
		return v, err
	}
	e.mu.Lock()
	m[name] = v
	e.mu.Unlock()
	return v, nil
}

// SessionStream is the copy of per-session stream that holds session
// sid's messages, as [Engine.SessionKV] finds buckets.
func (e *Engine) SessionStream(ctx context.Context, stream, sid string) (jetstream.Stream, error) {
	name := subjects.SessionStream(stream, sid)
	s, err := cached(e, e.streams, name, func() (jetstream.Stream, error) { return e.js.Stream(ctx, name) })
	if err != nil {
		return nil, homedErr(regionErr(err, subjects.SessionRegion(sid), "stream", name), sid, "stream", name)
	}
	return s, nil
}

// mirrorOrigin is the metadata key cluster/region marks its mirrors with.
const mirrorOrigin = "iii.region.origin"

// regionErr is the error of opening name, region's copy of a stream or
// bucket: not_found wrapping [ErrUnknownRegion] when a region's copy does
// not exist, unavailable otherwise.
func regionErr(err error, region, what, name string) error {
	if region != "" && (errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound)) {
		return wire.Wrap(wire.CodeNotFound, fmt.Errorf("%w: %w", ErrUnknownRegion, err), "region %q has no %s %s", region, what, name)
	}
	return wire.Wrap(wire.CodeUnavailable, err, "%s %s", what, name)
}

// homedErr says, for an unknown region, which session asked and what to
// run; other errors pass unchanged.
func homedErr(err error, sid, what, name string) error {
	if !errors.Is(err, ErrUnknownRegion) {
		return err
	}
	if we, ok := err.(*wire.Error); ok && we.Unwrap() != nil {
		err = we.Unwrap() // say it once
	}
	r := subjects.SessionRegion(sid)
	return wire.Wrap(wire.CodeNotFound, err, "session %q is homed in region %q, which has no %s %s: no iii node runs there (iii up --region %s)", sid, r, what, name, r)
}

// SessionRegions lists the regions that have a copy of per-session stream
// (for a bucket, pass its stream "KV_<bucket>"), the primary copy first as
// "", then the regions in name order. Watchers and consumers that serve
// every session run one per copy.
func (e *Engine) SessionRegions(ctx context.Context, stream string) ([]string, error) {
	regions := []string{""}
	// The copy of a region r is RegionalCopy(stream, r): the prefix is
	// that name for an empty region name.
	prefix := strings.TrimSuffix(subjects.RegionalCopy(stream, "r"), "r")
	// Mirrors made by `iii region mirror` ("<name>_<region>") are not
	// copies: they carry the origin's name in their metadata.
	infos := e.js.ListStreams(ctx)
	for si := range infos.Info() {
		r, ok := strings.CutPrefix(si.Config.Name, prefix)
		if !ok || subjects.ValidateRegion(r) != nil || si.Config.Mirror != nil || si.Config.Metadata[mirrorOrigin] != "" {
			continue
		}
		regions = append(regions, r)
	}
	if err := infos.Err(); err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "list streams")
	}
	slices.Sort(regions[1:])
	return regions, nil
}
