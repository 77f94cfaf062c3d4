package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unique"

	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// Functions of the sandbox worker the orchestrator calls.
const (
	sandboxCreate  = "sandbox::create"
	sandboxDestroy = "sandbox::destroy"
)

// sandboxCreated is the part of sandbox::create's answer provisioning uses.
type sandboxCreated struct {
	SandboxID string `json:"sandbox_id"`
	Workdir   string `json:"workdir"`
	Isolation string `json:"isolation"`
	Network   bool   `json:"network"`
}

// Functions of the directory the orchestrator calls.
const (
	skillsIndex = "directory::skills::index"
	skillsGet   = "directory::skills::get"
)

// indexTTL is how long the skills index is reused across runs.
const indexTTL = time.Second

// workspace is the grain's Workspace port. At provisioning it assembles
// the run's system prompt (unless the run brought one: that is used
// verbatim) from the directory's skills index and the run's default
// skills, and gives a run with sandbox:true its sandbox (sandbox::create
// is idempotent per session, so provisioning re-run after a crash finds
// the same one). When the run ends the sandbox is destroyed.
type workspace struct {
	e      *engine.Engine
	logger *slog.Logger
	// tools, when set, is the model's tool list: the index leaves out
	// the skills of functions it lacks (no worker serves them now).
	tools *toolList

	mu      sync.Mutex
	index   string
	indexAt time.Time
}

func (w *workspace) Provision(ctx context.Context, sid string, run agent.RunStart) turn.Input {
	ctx = engine.WithSession(ctx, sid, "")
	parts := promptParts{Mode: run.Mode}
	if run.SystemPrompt == "" {
		var live func(string) bool
		if w.tools != nil {
			if ids := w.tools.registered(ctx); ids != nil {
				live = func(fn string) bool { return ids[fn] }
			}
		}
		parts.Index = offeredIndex(w.skillsIndex(ctx), run, live)
		for _, id := range run.Skills {
			var doc skillDoc
			if err := w.call(ctx, skillsGet, map[string]string{"id": id}, &doc); err != nil {
				return provisionFailed(fmt.Sprintf("the run's skill %q", id), err)
			}
			parts.Skills = append(parts.Skills, doc)
		}
	}
	if run.Sandbox {
		var sb sandboxCreated
		// sandbox::create is idempotent per session: a repeat after a
		// lost answer finds the same sandbox.
		err := w.call(ctx, sandboxCreate, map[string]any{"session_id": sid, "network": run.SandboxNetwork}, &sb)
		if err != nil {
			return provisionFailed("the run's sandbox", err)
		}
		parts.Sandbox = &sb
	}
	if run.SystemPrompt != "" {
		return turn.Provisioned{} // a caller's system prompt is used verbatim
	}
	// Most runs assemble the same prompt: one copy serves every grain
	// holding it (≈1 KiB each).
	return turn.Provisioned{SystemPrompt: unique.Make(assemblePrompt(parts)).Value()}
}

// provisionCallAttempt bounds one attempt of a provisioning call: a request
// whose worker died with its node is never answered, and the call is
// tried again (on a live worker) within the provisioning's time.
const provisionCallAttempt = 20 * time.Second

// call triggers fn, again after a timeout or an unavailable answer (every
// provisioning call is safe to repeat), until ctx ends.
func (w *workspace) call(ctx context.Context, fn string, req, resp any) error {
	return engine.Retry(ctx, provisionCallAttempt, func(ctx context.Context) error { return w.e.Trigger(ctx, fn, req, resp) }, transientCall)
}

// provisionFailed fails the run: what could not be had, and why.
func provisionFailed(what string, err error) turn.Input {
	we := wire.From(err)
	kind := agent.ErrorTransient
	switch we.Code {
	case wire.CodeInvalidPayload, wire.CodeForbidden, wire.CodeNotFound:
		kind = agent.ErrorPermanent
	}
	return turn.ProvisionFailed{Kind: kind, Message: what + " could not be provisioned: " + we.Error()}
}

// skillsIndex returns the directory's index, reused for [indexTTL]; ""
// when no directory answers (the prompt then goes without it).
func (w *workspace) skillsIndex(ctx context.Context) string {
	w.mu.Lock()
	if !w.indexAt.IsZero() && time.Since(w.indexAt) < indexTTL {
		idx := w.index
		w.mu.Unlock()
		return idx
	}
	w.mu.Unlock()
	var out struct {
		Markdown string `json:"markdown"`
	}
	if err := w.call(ctx, skillsIndex, map[string]any{}, &out); err != nil {
		if !errors.Is(err, wire.ErrFunctionNotFound) {
			w.logger.WarnContext(ctx, "skills index unavailable; the system prompt goes without it", "error", err)
		}
		out.Markdown = ""
	}
	w.mu.Lock()
	w.index, w.indexAt = out.Markdown, time.Now()
	w.mu.Unlock()
	return out.Markdown
}

func (w *workspace) Release(ctx context.Context, sid string) error {
	ctx = engine.WithSession(ctx, sid, "")
	var out map[string]any
	err := w.e.Trigger(ctx, sandboxDestroy, map[string]any{"session_id": sid}, &out)
	if errors.Is(err, wire.ErrFunctionNotFound) {
		return nil // no sandbox worker runs: there is nothing to destroy
	}
	return err
}

// workspacePrompt tells the model where it works and with what.
func workspacePrompt(sb sandboxCreated) string {
	network := "off: commands cannot reach the network"
	if sb.Network {
		network = "on"
	}
	return fmt.Sprintf("You work in a sandboxed workspace: the directory %s. "+
		"Use fs::ls, fs::read, fs::glob and fs::grep to look at files there, fs::write and fs::edit to change them "+
		"(paths are relative to the workspace), and shell::exec to run commands inside it. "+
		"Nothing outside the workspace is visible or writable. Network access is %s.", sb.Workdir, network)
}
