package guest

import (
	"fmt"
	"os"

	"github.com/dryexec/dryexec/internal/imagemount"
)

// runImageView is wire.RoleImageView: fd 3 is the host's socket, args the
// image's layers, lowest first (in the userxattr form: only a host that is
// not root starts this role).
func runImageView(layers []string) int {
	if err := imagemount.SendView(3, layers, true); err != nil {
		fmt.Fprintf(os.Stderr, "dryexec guest: %v\n", err)
		return 1
	}
	return 0
}
