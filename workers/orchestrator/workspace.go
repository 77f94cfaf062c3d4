package orchestrator

import (
	"context"
	"errors"
	"fmt"

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

// workspace is the grain's Workspace port: a run with sandbox:true gets a
// sandbox at provisioning (sandbox::create is idempotent per session, so a
// provisioning re-run after a crash finds the same one) and loses it when
// the run ends.
type workspace struct {
	e *engine.Engine
}

func (w workspace) Provision(ctx context.Context, sid string, run agent.RunStart) turn.Input {
	if !run.Sandbox {
		return turn.Provisioned{}
	}
	ctx = engine.WithSession(ctx, sid, "")
	var sb sandboxCreated
	err := w.e.Trigger(ctx, sandboxCreate, map[string]any{"session_id": sid, "network": run.SandboxNetwork}, &sb)
	if err != nil {
		we := wire.From(err)
		kind := agent.ErrorTransient
		if we.Code == wire.CodeInvalidPayload || we.Code == wire.CodeForbidden {
			kind = agent.ErrorPermanent
		}
		return turn.ProvisionFailed{Kind: kind, Message: "the run asked for a sandbox and none could be made: " + we.Error()}
	}
	if run.SystemPrompt != "" {
		// A caller's system prompt is used verbatim (docs/PROTOCOL.md).
		return turn.Provisioned{}
	}
	return turn.Provisioned{SystemPrompt: workspacePrompt(sb)}
}

func (w workspace) Release(ctx context.Context, sid string) error {
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
		"Nothing outside the workspace is visible or writable. Network access is %s. "+
		"Some calls need a human's approval; if one is denied, do not retry it unchanged.", sb.Workdir, network)
}
