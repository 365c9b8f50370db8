package main

import (
	"context"
	"errors"
)

func demo(ctx context.Context, args []string) error {
	return errors.New("demo: not yet")
}
