package wire

import (
	"errors"
	"fmt"
)

// Frame size limits per kind. A reader checks the header against them
// before it reads a payload byte, and grows the payload buffer only as
// bytes arrive, so a peer cannot make either side allocate more than it
// actually sends, nor more than its kind's limit.
const (
	// MaxControl bounds a control message whose size does not grow with
	// the job (ready, go, exit, signal, stop, error, probe...).
	MaxControl = 1 << 20
	// MaxJobControl bounds the control messages that grow with the job:
	// hello and facts (one route per peer host), start (every local rank's
	// argv and environment) and the fences (every rank's PMI puts).
	MaxJobControl = 16 << 20
	// MaxOutputData is the most rank output one output frame carries: the
	// agent's output pumps deliver lines of up to proc.MaxLine (16 MiB)
	// whole with their newline, and cut longer ones in pieces of that
	// size plus one.
	MaxOutputData = 16<<20 + 1
	// MaxStdinData is the most stdin one stdin frame carries (the launcher
	// sends 64 KiB chunks).
	MaxStdinData = 1 << 20

	outputHeader = 5 // rank (4 bytes) and stream (1 byte)
	stdinHeader  = 4 // rank
)

// ErrTooLarge is returned for a frame longer than its kind's Limit.
var ErrTooLarge = errors.New("frame too large")

// ErrUnknownKind is returned for a frame of a kind this protocol version
// does not define.
var ErrUnknownKind = errors.New("unknown frame kind")

// FrameError is a framing violation: a frame of an unknown kind, or one
// longer than its kind allows. It ends the session: the stream cannot be
// read past it.
type FrameError struct {
	Kind  Kind
	Size  int64 // the payload length the header announced (or a sender tried)
	Limit int   // the kind's limit; 0 for an unknown kind
}

func (e *FrameError) Error() string {
	if e.Limit == 0 {
		return fmt.Sprintf("wire: unknown frame kind %d (%d bytes announced)", uint8(e.Kind), e.Size)
	}
	return fmt.Sprintf("wire: %s frame too large: %d bytes, the limit for %s is %d", e.Kind, e.Size, e.Kind, e.Limit)
}

// Unwrap makes errors.Is(err, ErrTooLarge) and errors.Is(err,
// ErrUnknownKind) work.
func (e *FrameError) Unwrap() error {
	if e.Limit == 0 {
		return ErrUnknownKind
	}
	return ErrTooLarge
}

// Limit is the longest payload a frame of kind k may carry, or 0 when k
// is not a kind of this protocol version.
func Limit(k Kind) int {
	switch k {
	case KindHello, KindFacts, KindStart, KindJob, KindFence, KindFenceDone, KindDumped:
		return MaxJobControl
	case KindOutput:
		return outputHeader + MaxOutputData
	case KindStdin:
		return stdinHeader + MaxStdinData
	case KindRelay, KindRelayed, KindSpread:
		return MaxEnvelope
	case KindFences, KindGathered, KindEnds:
		return MaxJobControl
	case KindRelayKey, KindLink, KindLinked, KindUnlink, KindCut:
		return MaxControl
	case KindReady, KindGo, KindStarted, KindExit, KindSignal, KindStop, KindAbort, KindDone,
		KindError, KindPrepare, KindPrepared, KindProbe, KindProbeResult, KindStdinAck, KindPing, KindDump,
		KindName, KindNameReply, KindSelftest, KindSelftestResult:
		return MaxControl
	}
	return 0
}

// checkFrame returns the FrameError for a frame of kind k and n payload
// bytes, or nil when it is within the protocol.
func checkFrame(k Kind, n int64) error {
	max := Limit(k)
	if max == 0 || n > int64(max) {
		return &FrameError{Kind: k, Size: n, Limit: max}
	}
	return nil
}
