package region

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultQuorumWait is how long [Takeover] waits for the meta group to have
// a leader when ctx has no deadline (a lost meta leader is replaced by an
// election among the surviving regions).
const DefaultQuorumWait = 30 * time.Second

// parallel bounds the streams a [Takeover] handles at once.
const parallel = 8

// Takeover makes region the home of every origin stream that was placed in
// the lost region and has a mirror (or placeholder) in region, under the
// origin's own name, so workers keep using the same bucket and stream
// names. Per mirrored stream:
//
//  1. promote the mirror (remove its mirror config): it stops following
//     the dead origin and keeps what it had;
//  2. delete the origin: the meta group drops the assignment although no
//     peer of the stream answers;
//  3. create the origin name in region as a mirror of the promoted mirror
//     (same sequence numbers, so KV revisions and CAS tokens survive) and
//     wait until it holds the mirror's last sequence;
//  4. promote it with the origin's full config (subjects, retention, direct
//     get, TTL markers...), placed in region;
//  5. delete the promoted mirror.
//
// A placeholder's origin (a work queue) is deleted and re-created empty.
// Before the origin is deleted the copy is marked ([MetaTakenOver]), so an
// origin that is gone while its copy is unmarked was deleted on purpose
// after the last [Mirror] run: it is reported [ActionSkipped], not brought
// back, and its copy is left for the operator to delete.
//
// An origin counts as lost when the meta leader reports it offline or when
// it does not answer within the probe timeout ([WithProbeTimeout]); one that
// answers with a leader is refused ([ErrOriginAlive]). A region that is cut
// off but running keeps acknowledging writes to its streams, all lost at
// takeover: fence it (stop its servers) first. A copy in region that does
// not answer after a few tries is reported failed, never skipped. Takeover
// needs the meta group's quorum and waits for a leader until ctx ends
// ([DefaultQuorumWait] without a deadline). Run again, it resumes where an
// interrupted run stopped.
func Takeover(ctx context.Context, js jetstream.JetStream, lost, region string, opts ...Option) (Report, error) {
	start := time.Now()
	o, err := prepare(js, region, opts)
	if err != nil {
		return Report{}, err
	}
	if err := ValidRegion(lost); err != nil {
		return Report{}, err
	}
	if lost == region {
		return Report{}, fmt.Errorf("%w: lost and new home are both %q", ErrInvalidRegion, region)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultQuorumWait)
		defer cancel()
	}
	sv, err := takeSurvey(ctx, js, region, o.probe, true)
	if err != nil {
		return Report{}, err
	}
	var mirrors []*jetstream.StreamInfo
	var silent []StreamReport
	var silentErrs []error
	var unanswered []error // probes of any stream that failed
	for _, name := range sv.names {
		p := sv.probes[name]
		if p.info == nil {
			if p.err != nil {
				unanswered = append(unanswered, fmt.Errorf("%s: %w", name, p.err))
			}
			// A copy in the surviving region that does not answer is not
			// skipped in silence: its origin would stay lost.
			if origin, ok := sv.copyOf(name, region); ok && o.filter(origin) && sv.probes[origin].lost() {
				err := fmt.Errorf("region: %q in %q did not answer (run Takeover again): %w", name, region, p.err)
				silent = append(silent, StreamReport{Stream: origin, Mirror: name, Home: lost, Action: ActionFailed, Reason: err.Error()})
				silentErrs = append(silentErrs, err)
			}
			continue
		}
		md, pl := p.info.Config.Metadata, p.info.Config.Placement
		if md[MetaOrigin] == "" || pl == nil || pl.Cluster != region || md[MetaHome] != lost || !o.filter(md[MetaOrigin]) {
			continue
		}
		mirrors = append(mirrors, p.info)
	}
	if len(mirrors) == 0 && len(silent) == 0 {
		// "No mirrors" only when every stream answered: a copy whose info
		// could not be read (no meta leader right after the lost region's
		// servers went: the usual case of a two-region deployment without
		// a witness) may be the mirror looked for.
		for _, err := range unanswered {
			if errors.Is(err, ErrNoQuorum) {
				return Report{}, fmt.Errorf("%w: the streams of region %q could not be read: %w", ErrNoQuorum, region, errors.Join(unanswered...))
			}
		}
		if len(unanswered) > 0 {
			return Report{}, fmt.Errorf("region: %d streams did not answer, so region %q may hold mirrors of %q (run Takeover again): %w", len(unanswered), region, lost, errors.Join(unanswered...))
		}
		return Report{}, fmt.Errorf("%w: region %q holds no mirror of a stream homed in %q", ErrNoMirrors, region, lost)
	}
	rep := Report{Streams: make([]StreamReport, len(mirrors), len(mirrors)+len(silent))}
	errs := make([]error, len(mirrors), len(mirrors)+len(silentErrs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, parallel)
	for i, m := range mirrors {
		origin, assigned := sv.probes[m.Config.Metadata[MetaOrigin]]
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			rep.Streams[i], errs[i] = takeoverOne(ctx, js, o, lost, region, m, origin, assigned)
		})
	}
	wg.Wait()
	rep.Streams, errs = append(rep.Streams, silent...), append(errs, silentErrs...)
	slices.SortStableFunc(rep.Streams, func(a, b StreamReport) int { return cmp.Compare(a.Stream, b.Stream) })
	rep.Took = time.Since(start)
	return rep, errors.Join(errs...)
}

// probe is the answer to one stream info request.
type probe struct {
	info *jetstream.StreamInfo
	err  error
}

// lost reports an origin that is gone: offline per the meta leader, or
// silent.
func (p probe) lost() bool {
	return p.info == nil && (errors.Is(p.err, ErrOffline) || errors.Is(p.err, ErrUnreachable))
}

func takeoverOne(ctx context.Context, js jetstream.JetStream, o *options, lost, region string, m *jetstream.StreamInfo, origin probe, assigned bool) (StreamReport, error) {
	start := time.Now()
	name := m.Config.Metadata[MetaOrigin]
	kind := m.Config.Metadata[MetaKind]
	sr := StreamReport{Stream: name, Mirror: m.Config.Name, Home: lost}
	log := o.logger.With("stream", name, "mirror", m.Config.Name, "kind", kind, "lost", lost, "region", region)
	fail := func(err error) (StreamReport, error) {
		sr.Action, sr.Reason, sr.Took = ActionFailed, err.Error(), time.Since(start)
		log.Error("region: takeover failed", "err", err)
		return sr, err
	}
	var ocfg jetstream.StreamConfig
	if err := json.Unmarshal([]byte(m.Config.Metadata[MetaConfig]), &ocfg); err != nil {
		return fail(fmt.Errorf("region: %q has no origin config: %w", m.Config.Name, err))
	}
	oi := origin.info
	copying := oi != nil && oi.Config.Mirror != nil && oi.Config.Mirror.Name == m.Config.Name
	done := oi != nil && oi.Config.Mirror == nil && oi.Config.Metadata[MetaTakenOver] != "" && clusterOf(oi) == region
	replicas := o.replicas
	if replicas == 0 {
		replicas = max(m.Config.Replicas, 1)
	}
	final := finalConfig(ocfg, lost, region, replicas)
	// A takeover marks its copy (and promotes a mirror) before it deletes
	// the origin, so an origin that is gone while its copy is unmarked was
	// deleted by someone else, on purpose: re-creating it would undo that.
	started := m.Config.Metadata[MetaTakenOver] != "" || kind == KindMirror && m.Config.Mirror == nil
	switch {
	case !assigned && !started:
		sr.Action, sr.Took = ActionSkipped, time.Since(start)
		sr.Reason = fmt.Sprintf("origin deleted since the last Mirror run, not by a takeover: not re-created (delete %q if it is not needed)", m.Config.Name)
		log.Info("region: origin deleted on purpose; not re-created")
		return sr, nil
	case !assigned, copying, done:
		// Gone, or an earlier run got this far.
	case reborn(oi, region) && replaceable(oi, m, kind):
		// A live client re-created the name in region after a run
		// deleted the lost origin, and its clients write it again: the
		// copy takes the name (below).
		if err := replace(ctx, js, log, oi, o.probe); err != nil {
			return fail(err)
		}
	case reborn(oi, region):
		// A live client re-created the name in region after a run
		// deleted the lost origin.
		if err := adopt(ctx, js, log, oi, m, kind, final); err != nil {
			return fail(err)
		}
		done = true
	case origin.lost():
		log.Info("region: origin lost", "why", origin.err)
	case oi != nil:
		return fail(fmt.Errorf("%w: %q has a leader in %q", ErrOriginAlive, name, clusterOf(oi)))
	default:
		return fail(origin.err)
	}
	if !done {
		if !started || kind == KindMirror && m.Config.Mirror != nil {
			// Mark the copy (and promote a mirror) before the origin is
			// deleted: a run resumed after that deletion can tell it from
			// an origin deleted on purpose.
			cfg := m.Config
			cfg.Metadata = maps.Clone(cfg.Metadata)
			cfg.Metadata[MetaTakenOver] = lost
			if kind == KindMirror {
				cfg.Mirror, cfg.MirrorDirect = nil, false
			}
			if _, err := js.UpdateStream(ctx, cfg); err != nil {
				return fail(mutate(fmt.Sprintf("promote %s %q", kind, m.Config.Name), err))
			}
			log.Info("region: copy marked taken over", "promoted", kind == KindMirror)
		}
		if assigned && !copying {
			if err := deleteStream(ctx, js, name, o.probe); err != nil {
				return fail(err)
			}
			log.Info("region: lost origin deleted")
			if o.afterDelete != nil {
				o.afterDelete(name)
			}
		}
		ms, err := js.Stream(ctx, m.Config.Name)
		if err != nil {
			return fail(classify(fmt.Sprintf("stream %q", m.Config.Name), err))
		}
		frozen := ms.CachedInfo().State
		if kind == KindPlaceholder {
			frozen = jetstream.StreamState{}
		}
		switch {
		case copying:
		case frozen.Msgs == 0:
			// Nothing to copy: start the sequence where the origin was.
			empty := final
			if frozen.LastSeq > 0 {
				empty.FirstSeq = frozen.LastSeq + 1
			}
			if _, err := js.CreateStream(ctx, empty); err != nil {
				// A live client (a member's membership heartbeat, say)
				// may re-create the name in region the moment the lost
				// origin is deleted: nothing was to be copied, so that
				// stream can be the new home.
				ex, ierr := js.Stream(ctx, name)
				if apiCode(err) != codeNameInUse || ierr != nil || !reborn(ex.CachedInfo(), region) {
					return fail(mutate(fmt.Sprintf("create %q in %q", name, region), err))
				}
				if err := adopt(ctx, js, log, ex.CachedInfo(), m, kind, final); err != nil {
					return fail(err)
				}
			}
		default:
			if err := createCopy(ctx, js, log, o.probe, region, final, m); err != nil {
				return fail(err)
			}
		}
		if copying || frozen.Msgs > 0 {
			if err := waitLastSeq(ctx, js, name, frozen.LastSeq); err != nil {
				return fail(err)
			}
			if _, err := js.UpdateStream(ctx, final); err != nil {
				return fail(mutate(fmt.Sprintf("promote %q in %q", name, region), err))
			}
		}
		log.Info("region: origin re-homed", "last_seq", frozen.LastSeq)
	}
	if err := deleteStream(ctx, js, m.Config.Name, o.probe); err != nil {
		return fail(err)
	}
	st, err := js.Stream(ctx, name)
	if err != nil {
		return fail(classify(fmt.Sprintf("stream %q", name), err))
	}
	info := st.CachedInfo()
	sr.Action, sr.Messages, sr.LastSeq, sr.Took = ActionPromoted, info.State.Msgs, info.State.LastSeq, time.Since(start)
	if kind == KindPlaceholder {
		sr.Action, sr.Reason = ActionRecreated, "not mirrored: re-created empty in the new home"
	}
	return sr, nil
}

// reborn reports an origin name that lives in region as a stream of its
// own (not a mirror, not re-created by a takeover): a live client created
// it after the lost origin was deleted.
func reborn(oi *jetstream.StreamInfo, region string) bool {
	return oi != nil && oi.Config.Mirror == nil && oi.Config.Metadata[MetaTakenOver] == "" && clusterOf(oi) == region
}

// adopt makes a reborn origin (oi) the new home when its mirror m holds
// nothing to copy (a placeholder's never does): it takes the origin's
// config. Otherwise the copy would be lost, and the takeover fails saying
// what to do.
func adopt(ctx context.Context, js jetstream.JetStream, log *slog.Logger, oi, m *jetstream.StreamInfo, kind string, final jetstream.StreamConfig) error {
	name := oi.Config.Name
	if kind != KindPlaceholder && m.State.Msgs > 0 {
		return fmt.Errorf("region: %q was created again in %q by a live client after its lost origin was deleted, and the mirror %q holds %d messages: stop the clients that write it, delete %q and run the takeover again",
			name, clusterOf(oi), m.Config.Name, m.State.Msgs, name)
	}
	if _, err := js.UpdateStream(ctx, final); err != nil {
		return mutate(fmt.Sprintf("adopt %q, created again in %q", name, clusterOf(oi)), err)
	}
	log.Info("region: origin created again by a live client; adopted", "messages", oi.State.Msgs)
	return nil
}

// replaceable reports a reborn origin (oi) the copy m replaces: m holds
// messages to copy and the origin's clients write again what they need
// ([MetaRewritten]). A placeholder's copy holds nothing: [adopt] keeps the
// reborn one.
func replaceable(oi, m *jetstream.StreamInfo, kind string) bool {
	return kind != KindPlaceholder && m.State.Msgs > 0 && rewritten(oi)
}

// rewritten reports a stream whose clients write again what they need
// ([MetaRewritten]).
func rewritten(si *jetstream.StreamInfo) bool {
	return si.Config.Metadata[MetaRewritten] != ""
}

// replace deletes a reborn origin its clients write again, so the copy can
// take its name.
func replace(ctx context.Context, js jetstream.JetStream, log *slog.Logger, oi *jetstream.StreamInfo, each time.Duration) error {
	if err := deleteStream(ctx, js, oi.Config.Name, each); err != nil {
		return err
	}
	log.Warn("region: origin created again by a live client; replaced by the copy (its clients write their messages again)",
		"messages", oi.State.Msgs)
	return nil
}

// rebornTries bounds how many times [createCopy] replaces an origin that
// live clients keep creating again.
const rebornTries = 5

// createCopy creates the origin name in region as a mirror of the promoted
// copy m, which holds messages. A live client (a member's membership heartbeat, say) may have
// created the name again since the lost origin was deleted: a stream its
// clients write again ([MetaRewritten]) is replaced, up to rebornTries
// times; any other is kept, and the takeover fails saying what to do
// (deleting it would lose the writes it acknowledged).
func createCopy(ctx context.Context, js jetstream.JetStream, log *slog.Logger, each time.Duration, region string, final jetstream.StreamConfig, m *jetstream.StreamInfo) error {
	name := final.Name
	for try := 0; ; try++ {
		_, err := js.CreateStream(ctx, copyConfig(final, m.Config.Name))
		if err == nil {
			return nil
		}
		ex, ierr := js.Stream(ctx, name)
		if apiCode(err) != codeNameInUse || ierr != nil || !reborn(ex.CachedInfo(), region) {
			return mutate(fmt.Sprintf("create %q in %q", name, region), err)
		}
		oi := ex.CachedInfo()
		if !rewritten(oi) {
			return fmt.Errorf("region: %q was created again in %q by a live client after its lost origin was deleted, and the copy %q holds messages: stop the clients that write it, delete %q and run the takeover again",
				name, region, m.Config.Name, name)
		}
		if try == rebornTries {
			return fmt.Errorf("region: %q was created again in %q by live clients %d times while the takeover replaced it: run the takeover again", name, region, try+1)
		}
		if err := replace(ctx, js, log, oi, each); err != nil {
			return err
		}
	}
}

// finalConfig is the origin's config homed in region.
func finalConfig(origin jetstream.StreamConfig, lost, region string, replicas int) jetstream.StreamConfig {
	c := cleanConfig(origin)
	c.Placement = &jetstream.Placement{Cluster: region}
	c.Replicas = replicas
	c.Mirror, c.MirrorDirect, c.FirstSeq = nil, false, 0
	c.Metadata[MetaTakenOver] = lost
	return c
}

// copyConfig is final as a mirror of the promoted mirror: no subjects (no
// writes land before the copy is complete), no direct get (no reads of a
// partial copy), nothing the server forbids on mirrors.
func copyConfig(final jetstream.StreamConfig, from string) jetstream.StreamConfig {
	c := cleanConfig(final)
	c.Subjects, c.Sources, c.SubjectTransform, c.RePublish = nil, nil, nil, nil
	c.Mirror = &jetstream.StreamSource{Name: from}
	c.AllowDirect, c.MirrorDirect = false, false
	c.Retention = jetstream.LimitsPolicy
	c.Duplicates, c.FirstSeq, c.Sealed, c.SubjectDeleteMarkerTTL = 0, 0, false, 0
	c.AllowMsgCounter, c.AllowAtomicPublish, c.AllowBatchPublish, c.AllowMsgSchedules = false, false, false, false
	return c
}

// survey is every stream the meta group knows, each asked for its info.
type survey struct {
	names  []string
	probes map[string]probe
}

// takeSurvey lists the stream names (answered by the meta leader from its
// assignments, so streams of a silent region are included) and then asks
// every stream for its info at once, each request bounded by each. With
// wait it waits for a meta leader until ctx ends. region's own copies
// that did not answer are asked again ([survey.reprobe]).
func takeSurvey(ctx context.Context, js jetstream.JetStream, region string, each time.Duration, wait bool) (survey, error) {
	names, err := streamNames(ctx, js, each, wait)
	if err != nil {
		return survey{}, err
	}
	sv := survey{names: names, probes: probeAll(ctx, js, names, each)}
	sv.reprobe(ctx, js, region, each)
	return sv, nil
}

// reprobeTries bounds how often [survey.reprobe] asks again, the n-th
// time after n×reprobePause.
const (
	reprobeTries = 3
	reprobePause = 100 * time.Millisecond
)

// reprobe asks again, up to [reprobeTries] times, for the info of the
// streams that did not answer and whose names say they are region's copies
// ([MirrorName]) of a listed stream. Those live in the region the caller
// is in and should answer: one created a moment ago, or whose server was
// busy, must not be taken for an absent one (a mirror left out of a
// takeover leaves its origin lost).
func (s survey) reprobe(ctx context.Context, js jetstream.JetStream, region string, each time.Duration) {
	for try := range reprobeTries {
		var again []string
		for _, n := range s.names {
			if _, ok := s.copyOf(n, region); ok && s.probes[n].info == nil {
				again = append(again, n)
			}
		}
		if len(again) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(try+1) * reprobePause):
		}
		for n, p := range probeAll(ctx, js, again, each) {
			s.probes[n] = p
		}
	}
}

// copyOf says whether name is region's copy of a listed stream, and which.
func (s survey) copyOf(name, region string) (origin string, ok bool) {
	origin, ok = strings.CutSuffix(name, "_"+region)
	if !ok || origin == "" {
		return "", false
	}
	if _, listed := s.probes[origin]; !listed {
		return "", false
	}
	return origin, true
}

// infos are the streams that answered, sorted by name.
func (s survey) infos() []*jetstream.StreamInfo {
	var out []*jetstream.StreamInfo
	for _, n := range s.names {
		if p := s.probes[n]; p.info != nil {
			out = append(out, p.info)
		}
	}
	return out
}

func (s survey) byName() map[string]*jetstream.StreamInfo {
	m := make(map[string]*jetstream.StreamInfo, len(s.names))
	for n, p := range s.probes {
		if p.info != nil {
			m[n] = p.info
		}
	}
	return m
}

// streamNames lists every stream name the meta group has assigned; with
// wait it retries until ctx ends while there is no meta leader.
func streamNames(ctx context.Context, js jetstream.JetStream, each time.Duration, wait bool) ([]string, error) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, max(each, 2*time.Second))
		l := js.StreamNames(rctx)
		var names []string
		for n := range l.Name() {
			names = append(names, n)
		}
		err := l.Err()
		cancel()
		if err == nil {
			slices.Sort(names)
			return names, nil
		}
		err = classify("list stream names", err)
		if !wait || !errors.Is(err, ErrNoQuorum) && !timeout(err) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %v", ErrNoQuorum, err)
		case <-t.C:
		}
	}
}

// probeAll asks for the info of every stream at once, each request bounded
// by each: streams of a silent region simply time out.
func probeAll(ctx context.Context, js jetstream.JetStream, names []string, each time.Duration) map[string]probe {
	out := make(map[string]probe, len(names))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for _, name := range names {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			rctx, cancel := context.WithTimeout(ctx, each)
			defer cancel()
			var p probe
			s, err := js.Stream(rctx, name)
			switch {
			case err == nil:
				p.info = s.CachedInfo()
			case timeout(err) && ctx.Err() == nil:
				p.err = fmt.Errorf("%w: %q: %v", ErrUnreachable, name, err)
			default:
				p.err = classify(fmt.Sprintf("stream %q", name), err)
			}
			mu.Lock()
			out[name] = p
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// deleteStream deletes name and treats "already gone" as success. When the
// stream's peers are all offline, the meta leader answers; when they are
// merely silent nobody does, although the meta group drops the assignment,
// so a stream info that says "not found" settles it.
func deleteStream(ctx context.Context, js jetstream.JetStream, name string, each time.Duration) error {
	dctx, cancel := context.WithTimeout(ctx, 2*each)
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- js.DeleteStream(dctx, name) }()
	t := time.NewTicker(5 * pollInterval)
	defer t.Stop()
	for {
		select {
		case err := <-res:
			if err == nil || errors.Is(err, jetstream.ErrStreamNotFound) {
				return nil
			}
			if _, ierr := js.Stream(ctx, name); errors.Is(ierr, jetstream.ErrStreamNotFound) {
				return nil
			}
			return mutate(fmt.Sprintf("delete %q", name), err)
		case <-t.C:
			ictx, icancel := context.WithTimeout(ctx, min(each, 250*time.Millisecond))
			_, ierr := js.Stream(ictx, name)
			icancel()
			if errors.Is(ierr, jetstream.ErrStreamNotFound) {
				return nil
			}
		}
	}
}

// waitLastSeq polls until stream name holds sequence last.
func waitLastSeq(ctx context.Context, js jetstream.JetStream, name string, last uint64) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		s, err := js.Stream(ctx, name)
		if err == nil && s.CachedInfo().State.LastSeq >= last {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("region: %q did not reach sequence %d: %w", name, last, ctx.Err())
		case <-t.C:
		}
	}
}
