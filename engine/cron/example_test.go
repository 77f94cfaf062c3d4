package cron_test

import (
	"fmt"
	"time"

	"github.com/iii-on-nats/iii/engine/cron"
)

func ExampleParse() {
	after := time.Date(2030, 3, 8, 17, 30, 0, 0, time.UTC) // a Friday
	for _, expr := range []string{"0 9 * * MON-FRI", "*/15 * * * *", "30 0 0 1 * *", "@weekly", "@every 90m"} {
		x, err := cron.Parse(expr)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%-16s %s\n", expr, x.Next(after).Format(time.RFC3339))
	}
	_, err := cron.Parse("0 0 30 2 *")
	fmt.Println(err)
	// Output:
	// 0 9 * * MON-FRI  2030-03-11T09:00:00Z
	// */15 * * * *     2030-03-08T17:45:00Z
	// 30 0 0 1 * *     2030-04-01T00:00:30Z
	// @weekly          2030-03-10T00:00:00Z
	// @every 90m       2030-03-08T18:00:00Z
	// cron: invalid expression: "0 0 30 2 *": never fires
}

func ExampleParseInLocation() {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		fmt.Println(err)
		return
	}
	x, _ := cron.ParseInLocation("0 9 * * *", paris)
	next := x.Next(time.Date(2030, 7, 1, 0, 0, 0, 0, time.UTC))
	fmt.Println(next, "=", next.UTC())
	// Output: 2030-07-01 09:00:00 +0200 CEST = 2030-07-01 07:00:00 +0000 UTC
}
