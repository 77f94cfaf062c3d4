package region

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Metadata keys this package writes on the streams it creates. A mirror is
// recognised by [MetaOrigin], never by its name.
const (
	// MetaOrigin names the origin stream of a mirror or placeholder.
	MetaOrigin = "iii.region.origin"
	// MetaKind is [KindMirror] or [KindPlaceholder].
	MetaKind = "iii.region.kind"
	// MetaHome is the cluster the origin was placed in when the mirror was
	// last created or updated: the region a [Takeover] replaces.
	MetaHome = "iii.region.home"
	// MetaConfig is the origin's stream config (JSON) as of the last
	// [Mirror] run: a [Takeover] rebuilds the origin from it, since a lost
	// origin cannot be asked for its config.
	MetaConfig = "iii.region.config"
	// MetaSpec is a digest of the mirror's desired config; an unchanged
	// digest makes a re-run of [Mirror] a no-op.
	MetaSpec = "iii.region.spec"
	// MetaTakenOver marks a stream re-created by [Takeover], and a mirror
	// or placeholder a takeover has started on (set before the origin is
	// deleted); its value is the lost region.
	MetaTakenOver = "iii.region.taken-over-from"
	// MetaRewritten is set (to any value) by the creator of a stream whose
	// clients write again, on their own, every message they need (a
	// heartbeat, such as cluster membership's). When a live client creates
	// such a stream again in the new home while a [Takeover] runs, the
	// takeover replaces it with the copy instead of failing: the few
	// messages written to it meanwhile are written again by their clients.
	MetaRewritten = "iii.region.rewritten"
	// MetaOriginCreated is when the origin a mirror follows was created
	// (RFC 3339, UTC): an origin deleted and created again under its name
	// is a new incarnation, and [Mirror] makes its mirror anew.
	MetaOriginCreated = "iii.region.origin-created"
)

// Kinds of the streams [Mirror] keeps in a region ([MetaKind]).
const (
	// KindMirror is a mirror: the origin's messages, same sequences.
	KindMirror = "mirror"
	// KindPlaceholder is an empty stream that only records the config of an
	// origin that cannot be mirrored (work queue, counters), so a
	// [Takeover] can re-create it even when its home does not answer.
	KindPlaceholder = "placeholder"
)

// JetStream API error codes this package branches on (nats-server
// server/errors.json).
const (
	codeNoPeers      jetstream.ErrorCode = 10005 // no suitable peers for placement
	codeClusterNA    jetstream.ErrorCode = 10008 // meta group without leader
	codeInsufficient jetstream.ErrorCode = 10023
	codeStreamOff    jetstream.ErrorCode = 10118 // all peers offline
	codeNameInUse    jetstream.ErrorCode = 10058 // stream name already in use
)

// pollInterval paces the wait for a stream to catch up.
const pollInterval = 10 * time.Millisecond

// Action is what [Mirror] or [Takeover] did with one stream.
type Action string

// Actions.
const (
	// ActionCreated: a mirror was created in the region.
	ActionCreated Action = "created"
	// ActionUpdated: an existing mirror's config was changed.
	ActionUpdated Action = "updated"
	// ActionUnchanged: the mirror already had the desired config.
	ActionUnchanged Action = "unchanged"
	// ActionSkipped: the stream is not mirrored (see Reason).
	ActionSkipped Action = "skipped"
	// ActionPlaceholder: the stream cannot be mirrored; an empty
	// placeholder records its config for a takeover (see Reason).
	ActionPlaceholder Action = "placeholder"
	// ActionPromoted: the origin name now lives in the region, holding the
	// mirror's messages under the same sequence numbers.
	ActionPromoted Action = "promoted"
	// ActionRecreated: a stream of the lost region that had a placeholder
	// (a work queue) was re-created empty in the region.
	ActionRecreated Action = "recreated"
	// ActionFailed: see Reason and the joined error.
	ActionFailed Action = "failed"
)

// StreamReport is the outcome for one origin stream.
type StreamReport struct {
	// Stream is the origin stream's name.
	Stream string
	// Mirror is the name of the mirror (or placeholder) in the region.
	Mirror string
	// Home is the cluster the origin was placed in.
	Home string
	// Messages and LastSeq are the state of the mirror ([Mirror]) or of
	// the stream now homed in the region ([Takeover]).
	Messages, LastSeq uint64
	// Action is what was done.
	Action Action
	// Reason explains a skip or a failure.
	Reason string
	// Took is the time spent on this stream.
	Took time.Duration
}

// Report is the outcome of one [Mirror] or [Takeover] call.
type Report struct {
	// Streams has one entry per stream acted on, sorted by name.
	Streams []StreamReport
	// Took is the duration of the whole call.
	Took time.Duration
}

// MirrorName is the name of the mirror of stream in region: stream + "_" +
// region ("KV_iii-turn-state" → "KV_iii-turn-state_B", i.e. KV bucket
// "iii-turn-state_B", which nats.go binds as a mirror bucket: reads from the
// mirror, writes to the origin).
func MirrorName(stream, region string) string { return stream + "_" + region }

// ValidRegion reports whether name can be a region (a cluster name usable
// inside stream names): 1..64 of [A-Za-z0-9_-].
func ValidRegion(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%w: %q must be 1..64 characters", ErrInvalidRegion, name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q may hold only letters, digits, '_' and '-'", ErrInvalidRegion, name)
		}
	}
	return nil
}

// Home is the cluster that stream is placed in (its leader's cluster). It
// returns [ErrOffline] when the meta leader reports every peer of the
// stream offline (its servers shut down) and [ErrUnreachable] when nobody
// answers before ctx ends (its region crashed or is cut off): that is how a
// client of another region notices that the home region is gone. A name
// that cannot be a stream's (empty, or with '.', '*', '>', '/', '\' or
// white space) is [engine.ErrInvalidOption].
func Home(ctx context.Context, js jetstream.JetStream, stream string) (string, error) {
	if js == nil {
		return "", fmt.Errorf("%w: nil JetStream", engine.ErrInvalidOption)
	}
	if stream == "" || strings.ContainsAny(stream, ">*. /\\\t\r\n") {
		return "", fmt.Errorf("%w: stream name %q", engine.ErrInvalidOption, stream)
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		if timeout(err) {
			return "", fmt.Errorf("%w: stream %q: %v", ErrUnreachable, stream, err)
		}
		return "", classify(fmt.Sprintf("stream %q", stream), err)
	}
	ci := s.CachedInfo().Cluster
	if ci == nil {
		return "", nil
	}
	return ci.Name, nil
}

// Mirror creates or updates, in region, a mirror of every selected origin
// stream that is placed in another cluster. Mirrors of KV streams inherit
// direct get (MirrorDirect), so kv.Get on the origin bucket name from a
// client in region is answered by the mirror. Idempotent: run it again
// after new buckets appear or origins change. Work-queue and counter
// streams get an empty placeholder instead ([KindPlaceholder]). Errors of
// single streams are joined into the returned error and the report lists
// every selected stream; one that does not answer within the probe timeout
// is reported failed with [ErrUnreachable].
func Mirror(ctx context.Context, js jetstream.JetStream, region string, opts ...Option) (Report, error) {
	start := time.Now()
	o, err := prepare(js, region, opts)
	if err != nil {
		return Report{}, err
	}
	sv, err := takeSurvey(ctx, js, region, o.probe, false)
	if err != nil {
		return Report{}, err
	}
	byName := sv.byName()
	var rep Report
	var errs []error
	for _, name := range sv.names {
		p := sv.probes[name]
		if p.info == nil {
			// A stream that does not answer cannot be mirrored now; say so
			// for the ones the filter would select.
			if o.filter(name) {
				rep.Streams = append(rep.Streams, StreamReport{Stream: name, Action: ActionFailed, Reason: p.err.Error()})
				errs = append(errs, p.err)
			}
			continue
		}
		sr, err := mirrorOne(ctx, js, o, region, p.info, byName)
		if sr == nil {
			continue
		}
		rep.Streams = append(rep.Streams, *sr)
		if err != nil {
			if errors.Is(err, ErrUnknownRegion) || errors.Is(err, ErrNoQuorum) || errors.Is(err, ErrNotClustered) || ctx.Err() != nil {
				rep.Took = time.Since(start)
				return rep, err
			}
			errs = append(errs, err)
		}
	}
	rep.Took = time.Since(start)
	return rep, errors.Join(errs...)
}

func mirrorOne(ctx context.Context, js jetstream.JetStream, o *options, region string, si *jetstream.StreamInfo, byName map[string]*jetstream.StreamInfo) (*StreamReport, error) {
	start := time.Now()
	ok, reason := selectOrigin(si.Config, o.filter)
	if !ok && reason == "" {
		return nil, nil
	}
	sr := &StreamReport{Stream: si.Config.Name, Home: clusterOf(si)}
	defer func() { sr.Took = time.Since(start) }()
	log := o.logger.With("stream", sr.Stream, "region", region)
	if sr.Home == "" {
		err := fmt.Errorf("%w: %q has no cluster", ErrNotClustered, sr.Stream)
		sr.Action, sr.Reason = ActionFailed, err.Error()
		return sr, err
	}
	if sr.Home == region {
		sr.Action, sr.Reason = ActionSkipped, "homed in region"
		return sr, nil
	}
	want, err := mirrorConfig(si.Config, sr.Home, region, o.replicas, reason)
	if err != nil {
		sr.Action, sr.Reason = ActionFailed, err.Error()
		return sr, err
	}
	sr.Mirror = want.Name
	created := ""
	if !si.Created.IsZero() {
		created = si.Created.UTC().Format(time.RFC3339Nano)
		want.Metadata[MetaOriginCreated] = created // not in the spec digest
	}
	var st jetstream.Stream
	action := ActionCreated
	switch cur := byName[want.Name]; {
	case cur == nil:
		st, err = js.CreateStream(ctx, want)
	case cur.Config.Metadata[MetaOrigin] != sr.Stream || cur.Config.Metadata[MetaKind] != want.Metadata[MetaKind] ||
		(cur.Config.Mirror == nil) != (want.Mirror == nil):
		err = fmt.Errorf("%w: %q exists and is not the %s of %q", ErrConflict, want.Name, want.Metadata[MetaKind], sr.Stream)
	case want.Mirror != nil && created != "" && cur.Config.Metadata[MetaOriginCreated] != "" && cur.Config.Metadata[MetaOriginCreated] != created:
		// The origin was deleted and created again since the mirror was
		// made: its sequences started over, and the mirror would mix the
		// two incarnations (or miss the new one's first messages). The
		// old incarnation is gone: so is its copy.
		log.Info("region: origin created again; mirror made anew", "mirror", want.Name,
			"was", cur.Config.Metadata[MetaOriginCreated], "now", created)
		if err = deleteStream(ctx, js, want.Name, o.probe); err == nil {
			st, err = js.CreateStream(ctx, want)
		}
		sr.Reason = "origin created again since the last run: mirror made anew"
	case cur.Config.Metadata[MetaSpec] == want.Metadata[MetaSpec] && cur.Config.Metadata[MetaOriginCreated] == want.Metadata[MetaOriginCreated]:
		action = ActionUnchanged
		st = nil
	default:
		action = ActionUpdated
		st, err = js.UpdateStream(ctx, want)
	}
	if err != nil {
		sr.Action, sr.Reason = ActionFailed, err.Error()
		return sr, mutate(fmt.Sprintf("%s %q in %q", want.Metadata[MetaKind], want.Name, region), err)
	}
	info := byName[want.Name]
	if st != nil {
		info = st.CachedInfo()
	}
	sr.Action, sr.Messages, sr.LastSeq = action, info.State.Msgs, info.State.LastSeq
	if reason != "" {
		sr.Action, sr.Reason = ActionPlaceholder, reason
	}
	log.Info("region: mirror ready", "mirror", want.Name, "kind", want.Metadata[MetaKind], "action", action)
	return sr, nil
}

// Lag reports, per mirror in region (by mirror name), how many sequence
// numbers the mirror is behind its origin: origin last seq − mirror last
// seq. Mirrors whose origin does not answer within [DefaultProbeTimeout]
// are left out, and so are mirrors that do not answer after a few tries.
func Lag(ctx context.Context, js jetstream.JetStream, region string) (map[string]uint64, error) {
	if _, err := prepare(js, region, nil); err != nil {
		return nil, err
	}
	sv, err := takeSurvey(ctx, js, region, DefaultProbeTimeout, false)
	if err != nil {
		return nil, err
	}
	byName := sv.byName()
	var mirrors []*jetstream.StreamInfo
	for _, m := range mirrorsIn(sv.infos(), region) {
		if m.Config.Metadata[MetaKind] == KindMirror {
			mirrors = append(mirrors, m)
		}
	}
	if len(mirrors) == 0 {
		return nil, fmt.Errorf("%w: region %q holds none", ErrNoMirrors, region)
	}
	out := make(map[string]uint64, len(mirrors))
	for _, m := range mirrors {
		origin := byName[m.Config.Metadata[MetaOrigin]]
		if origin == nil {
			continue
		}
		var lag uint64
		if origin.State.LastSeq > m.State.LastSeq {
			lag = origin.State.LastSeq - m.State.LastSeq
		}
		out[m.Config.Name] = lag
	}
	return out, nil
}

// selectOrigin says whether a stream is an origin to keep in other regions.
// reason is set for selected streams that cannot be mirrored (they get a
// placeholder).
func selectOrigin(cfg jetstream.StreamConfig, filter func(string) bool) (ok bool, reason string) {
	switch {
	case cfg.Metadata[MetaOrigin] != "", cfg.Mirror != nil, !filter(cfg.Name):
		return false, ""
	case cfg.Retention == jetstream.WorkQueuePolicy:
		return true, "work-queue stream: a mirror would consume its messages"
	case cfg.AllowMsgCounter:
		return true, "counter stream: the server forbids counters on mirrors"
	}
	return true, ""
}

// mirrorConfig derives the mirror of origin: same limits and storage, no
// subjects, no features the server forbids on mirrors (they come back when
// a takeover restores the origin's own config), placed in region. With a
// placeholder reason it derives an empty placeholder instead.
func mirrorConfig(origin jetstream.StreamConfig, home, region string, replicas int, placeholder string) (jetstream.StreamConfig, error) {
	raw, err := json.Marshal(cleanConfig(origin))
	if err != nil {
		return jetstream.StreamConfig{}, fmt.Errorf("region: encode config of %q: %w", origin.Name, err)
	}
	if replicas == 0 {
		replicas = max(origin.Replicas, 1)
	}
	md := map[string]string{MetaOrigin: origin.Name, MetaHome: home, MetaConfig: string(raw), MetaKind: KindMirror}
	var m jetstream.StreamConfig
	if placeholder != "" {
		md[MetaKind] = KindPlaceholder
		m = jetstream.StreamConfig{
			Name:        MirrorName(origin.Name, region),
			Description: "iii region placeholder of " + origin.Name + " (" + placeholder + ")",
			Storage:     jetstream.MemoryStorage,
			Replicas:    replicas,
			Placement:   &jetstream.Placement{Cluster: region},
			MaxMsgs:     1,
			Metadata:    md,
		}
		return withSpec(m)
	}
	m = cleanConfig(origin)
	m.Name = MirrorName(origin.Name, region)
	m.Description = "iii region mirror of " + origin.Name
	m.Subjects, m.Sources, m.SubjectTransform, m.RePublish = nil, nil, nil, nil
	m.Mirror = &jetstream.StreamSource{Name: origin.Name}
	m.MirrorDirect = origin.AllowDirect
	m.Placement = &jetstream.Placement{Cluster: region}
	m.Replicas = replicas
	// An interest stream's mirror has no consumers: it must keep messages
	// by limits. The origin's retention comes back on takeover.
	m.Retention = jetstream.LimitsPolicy
	m.Duplicates, m.FirstSeq, m.Sealed, m.Template = 0, 0, false, ""
	m.SubjectDeleteMarkerTTL = 0
	m.AllowMsgCounter, m.AllowAtomicPublish, m.AllowBatchPublish, m.AllowMsgSchedules = false, false, false, false
	maps.Copy(m.Metadata, md)
	return withSpec(m)
}

// withSpec stamps m with the digest of its own config ([MetaSpec]).
func withSpec(m jetstream.StreamConfig) (jetstream.StreamConfig, error) {
	spec, err := json.Marshal(m)
	if err != nil {
		return jetstream.StreamConfig{}, fmt.Errorf("region: encode %q: %w", m.Name, err)
	}
	sum := sha256.Sum256(spec)
	m.Metadata[MetaSpec] = hex.EncodeToString(sum[:12])
	return m, nil
}

// cleanConfig copies cfg without the server's own metadata ("_nats.*") and
// without this package's keys.
func cleanConfig(cfg jetstream.StreamConfig) jetstream.StreamConfig {
	md := make(map[string]string, len(cfg.Metadata)+4)
	for k, v := range cfg.Metadata {
		if strings.HasPrefix(k, "_nats.") || strings.HasPrefix(k, "iii.region.") {
			continue
		}
		md[k] = v
	}
	cfg.Metadata = md
	cfg.Subjects = slices.Clone(cfg.Subjects)
	return cfg
}

func prepare(js jetstream.JetStream, region string, opts []Option) (*options, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: nil JetStream", engine.ErrInvalidOption)
	}
	if err := ValidRegion(region); err != nil {
		return nil, err
	}
	return newOptions(opts)
}

// mirrorsIn lists the streams this package made in region (mirrors,
// placeholders, and mirrors a takeover already promoted), in input order.
func mirrorsIn(infos []*jetstream.StreamInfo, region string) []*jetstream.StreamInfo {
	var out []*jetstream.StreamInfo
	for _, si := range infos {
		md := si.Config.Metadata
		if md[MetaOrigin] == "" || si.Config.Placement == nil || si.Config.Placement.Cluster != region {
			continue
		}
		out = append(out, si)
	}
	return out
}

// clusterOf is the cluster si's leader is in.
func clusterOf(si *jetstream.StreamInfo) string {
	if si.Cluster == nil {
		return ""
	}
	return si.Cluster.Name
}

func apiCode(err error) jetstream.ErrorCode {
	var je jetstream.JetStreamError
	if errors.As(err, &je) && je.APIError() != nil {
		return je.APIError().ErrorCode
	}
	return 0
}

// mutate classifies the error of a create, update or delete: those are
// answered once the meta group commits them, so no answer at all most
// likely means it has no quorum.
func mutate(what string, err error) error {
	if timeout(err) {
		return fmt.Errorf("%s: %w: %w", what, ErrNoQuorum, err)
	}
	return classify(what, err)
}

// classify maps server answers onto this package's sentinels.
func classify(what string, err error) error {
	switch apiCode(err) {
	case codeStreamOff:
		return fmt.Errorf("%w: %s: %v", ErrOffline, what, err)
	case codeClusterNA:
		return fmt.Errorf("%w: %s: %v", ErrNoQuorum, what, err)
	case codeNoPeers, codeInsufficient:
		if strings.Contains(err.Error(), "no suitable peers") {
			return fmt.Errorf("%w (or too few servers there for the replicas): %s: %v", ErrUnknownRegion, what, err)
		}
	}
	if timeout(err) {
		return fmt.Errorf("%s: %w (does the JetStream meta group have a leader?)", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func timeout(err error) bool {
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrNoResponders)
}
