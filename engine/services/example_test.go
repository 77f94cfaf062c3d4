package services_test

import (
	"context"
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/services"
)

func Example() {
	x := enginetest.StartExample()
	defer x.Close()
	e := x.Engine
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	svc, err := services.Start(ctx, e, services.WithGateway())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer svc.Close(ctx)
	// Any NATS client now has the engine's functions:
	// nats req iii.fn.state.set '{"scope":"orders","key":"o1","value":{"total":42}}'
	if err := e.Trigger(ctx, "state::set", map[string]any{"scope": "orders", "key": "o1", "value": map[string]any{"total": 42}}, nil); err != nil {
		fmt.Println(err)
		return
	}
	var got struct {
		Value struct {
			Total int `json:"total"`
		} `json:"value"`
	}
	if err := e.Trigger(ctx, "state::get", map[string]any{"scope": "orders", "key": "o1"}, &got); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("total:", got.Value.Total, "gateway:", svc.Gateway() != nil)
	// Output: total: 42 gateway: true
}
