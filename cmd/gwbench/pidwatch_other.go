//go:build !linux

package main

import (
	"context"
	"errors"
	"time"
)

var errNoPidfd = errors.New("needs Linux (/proc and pidfds)")

func taggedPids(kv string) ([]int, error) { return nil, errNoPidfd }

func killPids(pids []int) error { return errNoPidfd }

type exitWatch struct{ pids []int }

func watchExits(pids []int) (*exitWatch, error) { return nil, errNoPidfd }

func (w *exitWatch) wait(ctx context.Context, deadline time.Time) ([]time.Time, error) {
	return nil, errNoPidfd
}

func (w *exitWatch) close() {}
