package sandbox

import (
	"errors"
	"os"
)

func serveFiles(f *os.File) error { return errors.New("not yet") }
