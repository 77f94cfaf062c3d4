package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/sandbox"
)

// Example creates a session's sandbox, runs a command in it as the
// session's model would (shell::exec, the session in the call's baggage),
// reads the file it wrote from the host side, and destroys the sandbox.
// It runs anywhere: allow_unsandboxed lets a machine without a working
// bubblewrap run the command unisolated (a production node would refuse).
func Example() {
	x := enginetest.StartExample()
	defer x.Close()
	e := x.Engine
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	home, err := os.MkdirTemp("", "iii-sandbox-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(home)

	w := sandbox.NewWorker(sandbox.WithRoot(filepath.Join(home, "sandboxes")), sandbox.WithAllowUnsandboxed(true))
	if err := w.Start(ctx, e); err != nil {
		panic(err)
	}
	defer w.Close(ctx)

	sb, err := engine.Call[sandbox.Sandbox](ctx, e, sandbox.CreateFunction, sandbox.CreateRequest{
		SessionID: "s1", Limits: sandbox.Limits{MemoryMB: 256, WallMs: 10_000},
	})
	if err != nil {
		panic(err)
	}
	res, err := engine.Call[sandbox.Result](engine.WithSession(ctx, "s1", ""), e, sandbox.ShellExecFunction,
		sandbox.Command{Command: "echo hello > greeting && cat greeting && pwd"})
	if err != nil {
		panic(err)
	}
	fmt.Print(res.Stdout == "hello\n"+sb.Workdir+"\n", " ", res.ExitCode, "\n")
	b, _ := os.ReadFile(filepath.Join(sb.Workdir, "greeting"))
	fmt.Print("host side: ", string(b))

	gone, err := engine.Call[sandbox.DestroyResponse](ctx, e, sandbox.DestroyFunction, sandbox.DestroyRequest{SessionID: "s1"})
	fmt.Println("destroyed:", gone.Destroyed, err)
	// Output:
	// true 0
	// host side: hello
	// destroyed: true <nil>
}
