//go:build !linux

package image

import (
	"context"
	"fmt"
	"os"
)

func mkfsErofs(context.Context, string, string, string, *os.File) error {
	return fmt.Errorf("%w: packing an erofs image needs Linux", ErrUnsupportedHost)
}
