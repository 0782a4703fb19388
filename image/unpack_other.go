//go:build !linux

package image

import (
	"context"
	"fmt"
	"io"
	"log/slog"
)

// canUnpack: layers are unpacked as overlayfs layers with openat2, both Linux's.
func canUnpack() error {
	return fmt.Errorf("%w: unpacking images needs Linux", ErrUnsupportedHost)
}

func callerForm() Form { return FormRoot }

func unpackLayer(context.Context, io.Reader, string, Form, *slog.Logger) (int, error) {
	return 0, canUnpack()
}
