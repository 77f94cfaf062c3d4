package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// FloorStage is one checkpoint of a storage-only turn: what it writes,
// then waits for.
type FloorStage struct {
	// Step publishes one turn step, asynchronously.
	Step bool
	// Events are published asynchronously; their acks are awaited at the
	// stage's end.
	Events int
	// Entries are transcript entries, each published and awaited.
	Entries int
	// Records are compare-and-sets of the session's turn record, each
	// awaited.
	Records int
}

// FloorPlan is a storage-only turn: a turn's stored writes, in stages, with
// nothing else (no actors, providers, bus calls or codecs).
type FloorPlan struct {
	Name   string
	Stages []FloorStage
}

// Writes is how many stored writes one turn of p makes.
func (p FloorPlan) Writes() int {
	n := 0
	for _, s := range p.Stages {
		n += s.Events + s.Entries + s.Records
		if s.Step {
			n++
		}
	}
	return n
}

// The storage floors the bench measures, in the order it runs them.
var (
	// FloorTurn is the bench's turn as the harness stores it today (26
	// writes: the "writes by stream" row): the run's record write and
	// step; then per message of the turn (the user's, the model's call,
	// the function's result, the model's answer) its transcript entry,
	// its events, and a record write where the grain checkpoints; the
	// terminal record write and agent_end. The session's meta is written
	// once per burst of appends (defer_meta), a fraction of a write a
	// turn, left out.
	FloorTurn = FloorPlan{Name: "turn", Stages: []FloorStage{
		{Records: 1, Step: true},
		{Entries: 1, Events: 3},
		{Entries: 1, Events: 5, Records: 1},
		{Entries: 1, Events: 3, Records: 1},
		{Entries: 1, Events: 4, Records: 1},
		{Records: 1, Events: 1},
	}}
	// FloorContract is the fewest writes today's contracts allow (24):
	// every event one stream message (SPEC §6), an entry per message, and
	// three record writes (the run's start, the answer with its call's
	// start, the terminal one).
	FloorContract = FloorPlan{Name: "contract", Stages: []FloorStage{
		{Records: 1, Step: true},
		{Entries: 1, Events: 3},
		{Entries: 1, Events: 5, Records: 1},
		{Entries: 1, Events: 3},
		{Entries: 1, Events: 4},
		{Records: 1, Events: 1},
	}}
	// FloorLean is a lean turn in DESIGN.md's sense (its "~15 writes";
	// 14 here): as FloorContract, with the events of a checkpoint one
	// message (two for the first), which SPEC §6 does not allow today.
	FloorLean = FloorPlan{Name: "lean", Stages: []FloorStage{
		{Records: 1, Step: true},
		{Entries: 1, Events: 2},
		{Entries: 1, Events: 1, Records: 1},
		{Entries: 1, Events: 1},
		{Entries: 1, Events: 1},
		{Records: 1, Events: 1},
	}}
	// FloorPlans are the floors of a Run.
	FloorPlans = []FloorPlan{FloorTurn, FloorContract, FloorLean}
)

// Payload sizes of the floor's writes: about the stored messages' mean
// sizes in a 100 × 10 run (stored bytes ÷ messages, less the subject and
// headers).
const (
	floorEventSize  = 320
	floorEntrySize  = 320
	floorRecordSize = 1536
	floorStepSize   = 128
)

// The floor's scratch streams and buckets, deleted after each plan.
const (
	floorEvents  = "III_BENCH_FLOOR_EVENTS"
	floorEntries = "III_BENCH_FLOOR_ENTRIES"
	floorSteps   = "III_BENCH_FLOOR_STEPS"
	floorRecords = "iii-bench-floor-records"
	floorSubject = "iii.bench.floor."
)

// FloorResult is one storage floor: cfg.Sessions sessions of cfg.Turns
// storage-only turns of one plan, on the same server(s) and replicas as the
// turns phase.
type FloorResult struct {
	Plan          string  `json:"plan"`
	WritesPerTurn int     `json:"writes_per_turn"`
	Turns         int     `json:"turns"`
	ElapsedS      float64 `json:"elapsed_s"`
	TurnsPerSec   float64 `json:"turns_per_s"`
	CPUPerTurnUs  float64 `json:"cpu_per_turn_us"`
	P50Ms         float64 `json:"p50_ms"`
	P99Ms         float64 `json:"p99_ms"`
	// TurnsRatio is the turns phase's turns/s ÷ this floor's: the share
	// of what storage alone allows that the harness reaches.
	TurnsRatio float64 `json:"turns_ratio,omitempty"`
}

// floorStore is one plan's scratch storage, written through two
// connections as the harness's are (the orchestrator's: events, steps,
// records; the session tree's: entries).
type floorStore struct {
	js, tree     jetstream.JetStream
	records      jetstream.KeyValue
	event, entry []byte
	record, st   []byte
}

// runFloors runs every plan of FloorPlans.
func runFloors(ctx context.Context, s *stack, cfg Config) ([]FloorResult, error) {
	var out []FloorResult
	for _, p := range FloorPlans {
		f, err := runFloor(ctx, s, cfg, p)
		if err != nil {
			return out, fmt.Errorf("bench: storage floor %q: %w", p.Name, err)
		}
		out = append(out, f)
	}
	return out, nil
}

// runFloor runs cfg.Sessions sessions of cfg.Turns turns of plan p on
// fresh scratch storage on node 1.
func runFloor(ctx context.Context, s *stack, cfg Config, p FloorPlan) (FloorResult, error) {
	f := FloorResult{Plan: p.Name, WritesPerTurn: p.Writes(), Turns: cfg.Sessions * cfg.Turns}
	var conns []*nats.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	for _, name := range []string{"floor-orchestrator", "floor-sessions"} {
		var (
			nc  *nats.Conn
			err error
		)
		if cfg.TCP {
			nc, err = nats.Connect(s.node.ClientURL(), nats.Name(name))
		} else {
			nc, err = s.node.Connect(nats.Name(name))
		}
		if err != nil {
			return f, err
		}
		conns = append(conns, nc)
	}
	fs, cleanup, err := newFloorStore(ctx, conns[0], conns[1], s.replicas)
	defer cleanup()
	if err != nil {
		return f, err
	}
	lat := make([]time.Duration, f.Turns)
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	fail := func(err error) { errOnce.Do(func() { firstErr = err }) }
	// Each session's record exists before the clock starts, as it does
	// after the session's first run.
	revs := make([]uint64, cfg.Sessions)
	for i := range cfg.Sessions {
		r, err := fs.records.Put(ctx, "s"+strconv.Itoa(i), fs.record)
		if err != nil {
			return f, err
		}
		revs[i] = r
	}
	cpu0, start := cpuTime(), time.Now()
	for i := range cfg.Sessions {
		wg.Go(func() {
			sid := "s" + strconv.Itoa(i)
			rev := revs[i]
			for turn := range cfg.Turns {
				t0 := time.Now()
				for si, st := range p.Stages {
					var err error
					if rev, err = fs.stage(ctx, sid, turn, si, st, rev); err != nil {
						fail(err)
						return
					}
				}
				lat[i*cfg.Turns+turn] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	if firstErr != nil {
		return f, firstErr
	}
	f.ElapsedS = elapsed.Seconds()
	f.TurnsPerSec = float64(f.Turns) / f.ElapsedS
	f.CPUPerTurnUs = float64(cpu.Microseconds()) / float64(f.Turns)
	l := summarize(lat)
	f.P50Ms, f.P99Ms = ms(l.p50), ms(l.p99)
	return f, nil
}

// newFloorStore creates the plan's scratch streams and buckets; cleanup
// deletes them (whatever was created).
func newFloorStore(ctx context.Context, orch, tree *nats.Conn, replicas int) (*floorStore, func(), error) {
	js, err := jetstream.New(orch)
	if err != nil {
		return nil, func() {}, err
	}
	tjs, err := jetstream.New(tree)
	if err != nil {
		return nil, func() {}, err
	}
	cleanup := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, name := range []string{floorEvents, floorEntries, floorSteps} {
			_ = js.DeleteStream(ctx, name)
		}
		_ = js.DeleteKeyValue(ctx, floorRecords)
	}
	for _, sc := range []jetstream.StreamConfig{
		{Name: floorEvents, Subjects: []string{floorSubject + "ev.>"}, Duplicates: 30 * time.Second},
		{Name: floorEntries, Subjects: []string{floorSubject + "en.>"}, Duplicates: 10 * time.Minute},
		{Name: floorSteps, Subjects: []string{floorSubject + "st.>"}, Duplicates: 2 * time.Minute},
	} {
		sc.Storage, sc.Replicas = jetstream.FileStorage, replicas
		if _, err := js.CreateStream(ctx, sc); err != nil {
			return nil, cleanup, err
		}
	}
	fs := &floorStore{js: js, tree: tjs,
		event: filler(floorEventSize), entry: filler(floorEntrySize),
		record: filler(floorRecordSize), st: filler(floorStepSize)}
	fs.records, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: floorRecords, History: 1, Storage: jetstream.FileStorage, Replicas: replicas})
	if err != nil {
		return nil, cleanup, err
	}
	return fs, cleanup, nil
}

// stage writes one stage of session sid's turn and waits for it; rev is
// the record's revision, returned updated.
func (fs *floorStore) stage(ctx context.Context, sid string, turn, si int, st FloorStage, rev uint64) (uint64, error) {
	id := sid + "." + strconv.Itoa(turn) + "." + strconv.Itoa(si) + "."
	var acks []jetstream.PubAckFuture
	publish := func(subj, msgID string, data []byte) error {
		m := nats.NewMsg(subj)
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, msgID)
		a, err := fs.js.PublishMsgAsync(m)
		if err != nil {
			return err
		}
		acks = append(acks, a)
		return nil
	}
	for e := range st.Events {
		if err := publish(floorSubject+"ev."+sid, id+"ev"+strconv.Itoa(e), fs.event); err != nil {
			return rev, err
		}
	}
	if st.Step {
		if err := publish(floorSubject+"st."+sid, id+"st", fs.st); err != nil {
			return rev, err
		}
	}
	for e := range st.Entries {
		m := nats.NewMsg(floorSubject + "en." + sid)
		m.Data = fs.entry
		m.Header.Set(jetstream.MsgIDHeader, id+"en"+strconv.Itoa(e))
		if _, err := fs.tree.PublishMsg(ctx, m); err != nil {
			return rev, err
		}
	}
	for range st.Records {
		r, err := fs.records.Update(ctx, sid, fs.record, rev)
		if err != nil {
			return rev, err
		}
		rev = r
	}
	for _, a := range acks {
		select {
		case <-a.Ok():
		case err := <-a.Err():
			return rev, err
		case <-ctx.Done():
			return rev, ctx.Err()
		}
	}
	return rev, nil
}

// filler is n bytes of text.
func filler(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}
