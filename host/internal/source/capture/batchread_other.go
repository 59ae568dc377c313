//go:build !linux

package capture

import (
	"context"
	"net"
)

// dialBatched returns dial as it is: batched reads rely on Linux's
// SO_RCVLOWAT, which other kernels do not honour in poll.
func dialBatched(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return dial
}
