package telemetry_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/iii-on-nats/iii/telemetry"
)

// A node's tracer provider from the environment: here the console
// exporter (OTEL_TRACES_EXPORTER=console), written to a buffer.
func Example() {
	ctx := context.Background()
	var out bytes.Buffer
	tp, err := telemetry.NewTracerProvider(ctx,
		telemetry.WithServiceName("iii"),
		telemetry.WithGetenv(func(k string) string {
			return map[string]string{"OTEL_TRACES_EXPORTER": "console"}[k]
		}),
		telemetry.WithConsole(&out))
	if err != nil {
		fmt.Println(err)
		return
	}
	_, span := tp.Tracer("example").Start(ctx, "run::start")
	span.End()
	_ = tp.Shutdown(ctx) // flushes the exporters
	fmt.Println("exported run::start:", strings.Contains(out.String(), `"Name":"run::start"`))
	// Output: exported run::start: true
}
