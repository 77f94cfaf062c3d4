package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// Sources of a loaded policy.
const (
	// SourceFile: the policy came from the watched file.
	SourceFile = "file"
	// SourceDefault: the file did not exist when the watcher started (or no
	// file is watched), so the fallback policy is in force.
	SourceDefault = "default"
)

// Status describes the policy a [Watcher] enforces, and is the response of
// policy::status and policy::reload.
type Status struct {
	// File is the watched path ("" when none).
	File string `json:"file"`
	// Source is [SourceFile] or [SourceDefault].
	Source string `json:"source"`
	// LoadedAt is when the policy in force was loaded.
	LoadedAt time.Time `json:"loaded_at"`
	// Rules is the number of rules in force.
	Rules int `json:"rules"`
	// SHA256 is the hex digest of the document in force.
	SHA256 string `json:"sha256"`
	// LastError says why the file's current content is not in force (it
	// does not parse, cannot be read, or was deleted); empty when the file
	// and the policy in force agree.
	LastError string `json:"last_error,omitempty"`
}

// Watcher keeps a policy file loaded: [NewWatcher] loads it once, [Start]
// polls it, and a new version replaces the policy in force only if it
// parses whole; otherwise the last good policy stays and the error is
// logged and reported in [Status]. Its methods are safe for concurrent use.
//
// A missing file at start means the fallback policy (the shipped default
// unless [WithFallback]); a file deleted after it was loaded keeps the
// last good policy, with an error, until a valid file is back.
type Watcher struct {
	path        string
	o           options
	fallback    *Policy
	fallbackSum [sha256.Size]byte

	cur atomic.Pointer[Policy]

	// readMu serializes each read of the file with the decision taken on
	// it (poll and Reload), so a poll that read the old content cannot
	// decide after a Reload that read the new one and clear its error.
	readMu sync.Mutex

	mu          sync.Mutex
	status      Status
	applied     [sha256.Size]byte // digest of the document in force
	pending     [sha256.Size]byte // a new digest seen once, applied when seen again
	hasPending  bool
	rejected    [sha256.Size]byte // the last digest that failed to parse
	rejectedErr string            // and why
	hasRejected bool
	started     bool
	closed      bool
	stop, done  chan struct{}
}

// NewWatcher loads the policy file at path (no goroutine yet: see
// [Watcher.Start]). A missing file, or an empty path, puts the fallback
// policy in force; a file that cannot be read or does not parse is an
// error, since there is no last good policy to keep.
func NewWatcher(path string, opts ...Option) (*Watcher, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	fb, err := parse(o.fallback, o)
	if err != nil {
		return nil, fmt.Errorf("%w: fallback policy: %w", engine.ErrInvalidOption, err)
	}
	w := &Watcher{path: path, o: o, fallback: fb, fallbackSum: sha256.Sum256(o.fallback)}
	if path == "" {
		w.useFallback()
		return w, nil
	}
	data, err := readPolicyFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		w.useFallback()
		w.o.logger.Warn("policy file does not exist; the shipped default policy is in force", "file", path)
		return w, nil
	case err != nil:
		return nil, err
	}
	p, err := parse(data, o)
	if err != nil {
		return nil, fmt.Errorf("policy file %s: %w", path, err)
	}
	w.apply(p, sha256.Sum256(data))
	return w, nil
}

func readPolicyFile(path string) ([]byte, error) {
	// Stat first: opening a FIFO blocks until a writer comes, which would
	// hang the node's start, and then every poll and policy::reload.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("policy file %s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err = f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("policy file %s is not a regular file", path)
	}
	// One byte past the limit is enough for Parse to refuse the file.
	return io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
}

func (w *Watcher) useFallback() {
	w.cur.Store(w.fallback)
	w.applied = w.fallbackSum
	w.status = Status{File: w.path, Source: SourceDefault, LoadedAt: w.o.now(), Rules: w.fallback.Len(), SHA256: hex.EncodeToString(w.fallbackSum[:])}
}

// apply puts p in force; w.mu is held (or w is not shared yet).
func (w *Watcher) apply(p *Policy, sum [sha256.Size]byte) {
	w.cur.Store(p)
	w.applied, w.hasPending, w.hasRejected = sum, false, false
	w.status = Status{File: w.path, Source: SourceFile, LoadedAt: w.o.now(), Rules: p.Len(), SHA256: hex.EncodeToString(sum[:])}
}

// Policy is the policy in force; never nil.
func (w *Watcher) Policy() *Policy { return w.cur.Load() }

// Check decides a call against the policy in force.
func (w *Watcher) Check(ctx context.Context, functionID string, args any) Decision {
	return w.Policy().CheckContext(ctx, functionID, args)
}

// Status describes the policy in force and the file's last error.
func (w *Watcher) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status
}

// Reload reads the file now, skipping the wait for a second identical read,
// and returns the resulting status. It returns the error that kept the
// file's content out of force (the last good policy stays), or nil.
func (w *Watcher) Reload() (Status, error) {
	if w.path == "" {
		return w.Status(), nil
	}
	w.readMu.Lock()
	defer w.readMu.Unlock()
	data, err := readPolicyFile(w.path)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && w.status.Source == SourceDefault {
			return w.status, nil
		}
		return w.status, w.readFailed(err)
	}
	sum := sha256.Sum256(data)
	if w.status.Source == SourceFile && sum == w.applied {
		w.clearError()
		w.hasPending = false
		return w.status, nil
	}
	err = w.load(data, sum)
	return w.status, err
}

// poll is one tick of the watch loop: a new version is loaded once two
// consecutive reads agree on it, so an editor's half-written file is never
// put in force (and a version that fails to parse is reported once).
func (w *Watcher) poll() {
	w.readMu.Lock()
	defer w.readMu.Unlock()
	data, err := readPolicyFile(w.path)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && w.status.Source == SourceDefault {
			w.clearError()
			return
		}
		_ = w.readFailed(err)
		return
	}
	sum := sha256.Sum256(data)
	switch {
	case w.status.Source == SourceFile && sum == w.applied:
		w.clearError()
		w.hasPending = false
	case !w.hasPending || sum != w.pending:
		w.pending, w.hasPending = sum, true
	case w.hasRejected && sum == w.rejected:
		// Parsed and refused already: not again, but its error is shown
		// again if a revert or a read error replaced it meanwhile
		// (setError logs it only then).
		w.setError(w.rejectedErr)
	default:
		_ = w.load(data, sum)
	}
}

// load parses data and puts it in force, or records why not; w.mu is held.
func (w *Watcher) load(data []byte, sum [sha256.Size]byte) error {
	p, err := parse(data, w.o)
	if err != nil {
		w.rejected, w.rejectedErr, w.hasRejected, w.hasPending = sum, err.Error(), true, false
		w.setError(err.Error())
		return err
	}
	w.apply(p, sum)
	w.o.logger.Info("policy loaded", "file", w.path, "rules", p.Len(), "sha256", w.status.SHA256)
	return nil
}

func (w *Watcher) readFailed(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("policy file %s does not exist", w.path)
	}
	w.setError(err.Error())
	return err
}

// setError records msg and logs it once per distinct message: the loud
// part of a rejected file.
func (w *Watcher) setError(msg string) {
	if msg == w.status.LastError {
		return
	}
	w.status.LastError = msg
	w.o.logger.Error("policy file rejected; the last good policy stays in force",
		"file", w.path, "error", msg, "source", w.status.Source, "rules", w.status.Rules, "sha256", w.status.SHA256)
}

func (w *Watcher) clearError() {
	if w.status.LastError != "" {
		w.status.LastError = ""
		w.o.logger.Info("policy file agrees with the policy in force again", "file", w.path)
	}
}

// Start begins polling the file every poll interval (a no-op without a
// file). It returns [ErrStarted] when called twice and [ErrClosed] after
// Close.
func (w *Watcher) Start() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
		return ErrClosed
	case w.started:
		return ErrStarted
	}
	w.started = true
	if w.path == "" {
		return nil
	}
	w.stop, w.done = make(chan struct{}), make(chan struct{})
	go w.loop(w.stop, w.done)
	return nil
}

func (w *Watcher) loop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(w.o.poll)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			w.poll()
		}
	}
}

// Close stops polling and waits for the loop until ctx ends. The policy in
// force stays readable. Close is idempotent.
func (w *Watcher) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	stop, done := w.stop, w.done
	w.mu.Unlock()
	if stop == nil {
		return nil
	}
	close(stop)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("policy: watcher still polling: %w", ctx.Err())
	}
}
