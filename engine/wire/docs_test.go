package wire_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine/wire"
)

// TestProtocolDocListsCatalog keeps docs/PROTOCOL.md's error table equal to
// the catalog.
func TestProtocolDocListsCatalog(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range wire.Catalog {
		row := fmt.Sprintf("| `%s` | %d | %t | %s |", e.Code, e.Status, e.Retryable, e.Meaning)
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/PROTOCOL.md lacks the catalog row %s", row)
		}
	}
}
