package session

import (
	"os"
	"testing"

	"github.com/dryexec/dryexec/guest"
)

func TestMain(m *testing.M) {
	guest.MaybeMain(os.Args)
	os.Exit(m.Run())
}
