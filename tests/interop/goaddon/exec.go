// exec.go owns widgets/exec: a hand-written RFC 6455 WebSocket server (accept key,
// masked client frames, fragmentation, ping/pong, the close handshake) on a
// hijacked HTTP/1.1 connection, speaking kube's v5.channel.k8s.io and
// v4.channel.k8s.io stream protocols, and the built-in commands cat, echo, env
// and exit.
package main

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

const (
	protocolV5 = "v5.channel.k8s.io"
	protocolV4 = "v4.channel.k8s.io"
	wsGUID     = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xA

	chanStdin  = 0
	chanStdout = 1
	chanStderr = 2
	chanStatus = 3
	chanResize = 4
	chanClose  = 255

	maxMessage = 16 << 20
)

// wsError ends a session with a close code.
type wsError struct {
	code   int
	reason string
}

func (e *wsError) Error() string { return fmt.Sprintf("websocket %d: %s", e.code, e.reason) }

var errPeerClosed = errors.New("the peer closed the websocket")

// wsConn is the server end of one WebSocket.
type wsConn struct {
	conn      net.Conn
	r         *bufio.Reader
	mu        sync.Mutex // serialises writes
	closeSent bool
}

// writeFrame sends one unmasked, unfragmented frame.
func (c *wsConn) writeFrame(op byte, payload []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closeSent {
		return errors.New("close frame already sent")
	}
	if op == opClose {
		c.closeSent = true
	}
	frame := make([]byte, 0, len(payload)+10)
	frame = append(frame, 0x80|op)
	switch n := len(payload); {
	case n < 126:
		frame = append(frame, byte(n))
	case n <= 0xFFFF:
		frame = append(frame, 126, byte(n>>8), byte(n))
	default:
		frame = append(frame, 127)
		frame = binary.BigEndian.AppendUint64(frame, uint64(n))
	}
	frame = append(frame, payload...)
	_ = c.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := c.conn.Write(frame)
	return err
}

func (c *wsConn) writeClose(code int, reason string) error {
	payload := binary.BigEndian.AppendUint16(nil, uint16(code))
	return c.writeFrame(opClose, append(payload, reason...))
}

// readFrame reads one client frame and unmasks it.
func (c *wsConn) readFrame() (fin bool, op byte, payload []byte, err error) {
	var head [2]byte
	if _, err = io.ReadFull(c.r, head[:]); err != nil {
		return
	}
	fin = head[0]&0x80 != 0
	op = head[0] & 0x0F
	if head[0]&0x70 != 0 {
		err = &wsError{1002, "reserved bits set"}
		return
	}
	if head[1]&0x80 == 0 {
		err = &wsError{1002, "client frames must be masked"}
		return
	}
	n := uint64(head[1] & 0x7F)
	switch n {
	case 126:
		var ext [2]byte
		if _, err = io.ReadFull(c.r, ext[:]); err != nil {
			return
		}
		n = uint64(binary.BigEndian.Uint16(ext[:]))
	case 127:
		var ext [8]byte
		if _, err = io.ReadFull(c.r, ext[:]); err != nil {
			return
		}
		n = binary.BigEndian.Uint64(ext[:])
	}
	if op >= opClose && (n > 125 || !fin) {
		err = &wsError{1002, "invalid control frame"}
		return
	}
	if n > maxMessage {
		err = &wsError{1009, "frame too large"}
		return
	}
	var mask [4]byte
	if _, err = io.ReadFull(c.r, mask[:]); err != nil {
		return
	}
	payload = make([]byte, n)
	if _, err = io.ReadFull(c.r, payload); err != nil {
		return
	}
	for i := range payload {
		payload[i] ^= mask[i%4]
	}
	return
}

// readMessage returns the next data message, answering pings and the close handshake.
func (c *wsConn) readMessage() ([]byte, error) {
	var msg []byte
	var msgOp byte
	inMessage := false
	for {
		fin, op, payload, err := c.readFrame()
		if err != nil {
			return nil, err
		}
		switch op {
		case opPing:
			if err := c.writeFrame(opPong, payload); err != nil {
				return nil, err
			}
			continue
		case opPong:
			continue
		case opClose:
			code := 1005
			if len(payload) >= 2 {
				code = int(binary.BigEndian.Uint16(payload))
			} else if len(payload) == 1 {
				return nil, &wsError{1002, "invalid close payload"}
			}
			reply := []byte{}
			if code != 1005 {
				reply = binary.BigEndian.AppendUint16(nil, uint16(code))
			}
			_ = c.writeFrame(opClose, reply) // fails harmlessly when ours went first
			return nil, errPeerClosed
		case opContinuation:
			if !inMessage {
				return nil, &wsError{1002, "continuation frame without a message"}
			}
		case opText, opBinary:
			if inMessage {
				return nil, &wsError{1002, "new message inside a fragmented message"}
			}
			inMessage, msgOp = true, op
		default:
			return nil, &wsError{1002, fmt.Sprintf("unknown opcode %d", op)}
		}
		if len(msg)+len(payload) > maxMessage {
			return nil, &wsError{1009, "message too large"}
		}
		msg = append(msg, payload...)
		if fin {
			if msgOp == opText && !utf8.Valid(msg) {
				return nil, &wsError{1007, "text message is not UTF-8"}
			}
			return msg, nil
		}
	}
}

// headerHas reports whether a comma-separated header lists token.
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, part := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(part), token) {
				return true
			}
		}
	}
	return false
}

func boolParam(v string) bool {
	b, _ := strconv.ParseBool(v)
	return b
}

func (s *server) serveExec(w *recorder, r *http.Request, id *identity, ns, name string) {
	if s.store.get(ns, name) == nil {
		writeStatus(w, r, errNotFound(name))
		return
	}
	q := r.URL.Query()
	command := q["command"]
	if len(command) == 0 {
		writeStatus(w, r, errBadRequest("you must specify at least 1 command"))
		return
	}
	stdin, stdout, stderr := boolParam(q.Get("stdin")), boolParam(q.Get("stdout")), boolParam(q.Get("stderr"))
	if !stdin && !stdout && !stderr {
		writeStatus(w, r, errBadRequest("you must specify at least one of stdin, stdout, stderr"))
		return
	}
	if r.ProtoMajor != 1 {
		writeStatus(w, r, errBadRequest(fmt.Sprintf("exec needs a WebSocket upgrade over HTTP/1.1, not %s", r.Proto)))
		return
	}
	if !headerHas(r.Header, "Connection", "upgrade") || !headerHas(r.Header, "Upgrade", "websocket") {
		writeStatus(w, r, errBadRequest("exec needs a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket); SPDY is not supported"))
		return
	}
	if r.Header.Get("Sec-WebSocket-Version") != "13" {
		w.Header().Set("Sec-WebSocket-Version", "13")
		writeStatus(w, r, errBadRequest("unsupported Sec-WebSocket-Version: only 13 is supported"))
		return
	}
	key := strings.TrimSpace(r.Header.Get("Sec-WebSocket-Key"))
	if raw, err := base64.StdEncoding.DecodeString(key); err != nil || len(raw) != 16 {
		writeStatus(w, r, errBadRequest("invalid Sec-WebSocket-Key"))
		return
	}
	offered := map[string]bool{}
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			offered[strings.TrimSpace(p)] = true
		}
	}
	var protocol string
	switch {
	case offered[protocolV5]:
		protocol = protocolV5
	case offered[protocolV4]:
		protocol = protocolV4
	default:
		writeStatus(w, r, errBadRequest(fmt.Sprintf("none of the offered subprotocols is supported: this server speaks %s and %s", protocolV5, protocolV4)))
		return
	}

	conn, brw, err := w.Hijack()
	if err != nil {
		writeStatus(w, r, &statusError{code: 500, reason: "InternalError", message: err.Error()})
		return
	}
	s.sessions.Add(1)
	s.stats.execsOpen.Add(1)
	defer func() {
		_ = conn.Close()
		s.stats.execsOpen.Add(-1)
		s.stats.connectionsOpen.Add(-1) // counted open since StateNew; hijacked conns never reach StateClosed
		s.sessions.Done()
	}()

	sum := sha1.Sum([]byte(key + wsGUID))
	var resp strings.Builder
	resp.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n")
	resp.WriteString("Sec-WebSocket-Accept: " + base64.StdEncoding.EncodeToString(sum[:]) + "\r\n")
	resp.WriteString("Sec-WebSocket-Protocol: " + protocol + "\r\n")
	names := make([]string, 0)
	for k := range w.Header() {
		if strings.HasPrefix(k, "X-Interop-") {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		resp.WriteString(k + ": " + w.Header().Get(k) + "\r\n")
	}
	resp.WriteString("\r\n")
	_ = conn.SetDeadline(time.Time{})
	if _, err := brw.WriteString(resp.String()); err != nil {
		return
	}
	if err := brw.Flush(); err != nil {
		return
	}
	ws := &wsConn{conn: conn, r: brw.Reader}
	sess := &session{
		ws: ws, v5: protocol == protocolV5, id: id,
		stdin: stdin, stdout: stdout, stderr: stderr,
		input: make(chan []byte, 64), stdinEOF: make(chan struct{}), gone: make(chan struct{}), done: make(chan struct{}),
	}
	sess.run(s, command)
}

// session is one exec: the socket reader feeds stdin; the command writes output.
type session struct {
	ws                    *wsConn
	v5                    bool
	id                    *identity
	stdin, stdout, stderr bool

	input    chan []byte   // stdin data
	stdinEOF chan struct{} // closed on [255, 0]
	eofOnce  sync.Once
	gone     chan struct{} // closed when the reader stops (close frame, error, EOF)
	done     chan struct{} // closed when the command has finished
}

func (ss *session) read() {
	defer close(ss.gone)
	for {
		msg, err := ss.ws.readMessage()
		if err != nil {
			var werr *wsError
			if errors.As(err, &werr) {
				_ = ss.ws.writeClose(werr.code, werr.reason)
			}
			return
		}
		if len(msg) == 0 {
			continue
		}
		switch {
		case ss.v5 && msg[0] == chanClose:
			if len(msg) == 2 && msg[1] == chanStdin {
				ss.eofOnce.Do(func() { close(ss.stdinEOF) })
			}
		case msg[0] == chanStdin:
			if !ss.stdin {
				continue
			}
			select {
			case ss.input <- msg[1:]:
			case <-ss.done:
			}
		case msg[0] == chanResize:
			// Terminal sizes mean nothing to the built-in commands.
		}
	}
}

func (ss *session) send(channel byte, data []byte) error {
	return ss.ws.writeFrame(opBinary, append([]byte{channel}, data...))
}

func (ss *session) out(data string) error {
	if !ss.stdout {
		return nil
	}
	return ss.send(chanStdout, []byte(data))
}

func (ss *session) errOut(data string) error {
	if !ss.stderr {
		return nil
	}
	return ss.send(chanStderr, []byte(data))
}

func (ss *session) run(s *server, command []string) {
	go ss.read()
	code, finished := ss.execute(s, command)
	close(ss.done)
	if !finished {
		if s.shutdown.Err() != nil {
			_ = ss.ws.writeClose(1001, "server shutting down")
			ss.waitReader(2 * time.Second)
		}
		return
	}
	status := map[string]interface{}{"metadata": map[string]interface{}{}, "status": "Success"}
	if code != 0 {
		status = map[string]interface{}{
			"metadata": map[string]interface{}{},
			"status":   "Failure",
			"message":  fmt.Sprintf("command terminated with non-zero exit code: error executing command %v, exit code %d", command, code),
			"reason":   "NonZeroExitCode",
			"details": map[string]interface{}{
				"causes": []interface{}{map[string]interface{}{"reason": "ExitCode", "message": strconv.Itoa(code)}},
			},
		}
	}
	body, _ := json.Marshal(status)
	if err := ss.send(chanStatus, body); err != nil {
		return
	}
	_ = ss.ws.writeClose(1000, "")
	ss.waitReader(5 * time.Second)
}

// waitReader gives the peer time to answer our close frame.
func (ss *session) waitReader(d time.Duration) {
	select {
	case <-ss.gone:
	case <-time.After(d):
		_ = ss.ws.conn.Close()
		<-ss.gone
	}
}

// execute runs a built-in command; finished is false when the socket or the
// server went away first (no status is sent then).
func (ss *session) execute(s *server, command []string) (code int, finished bool) {
	write := func(err error) bool {
		if err != nil {
			log.Printf("exec %v: %v", command, err)
			return false
		}
		return true
	}
	switch command[0] {
	case "cat":
		if !ss.stdin {
			return 0, true
		}
		for {
			select {
			case data := <-ss.input:
				if !write(ss.out(string(data))) {
					return 0, false
				}
			case <-ss.stdinEOF:
				// Drain what arrived before the close of stdin.
				for {
					select {
					case data := <-ss.input:
						if !write(ss.out(string(data))) {
							return 0, false
						}
					default:
						return 0, true
					}
				}
			case <-ss.gone:
				return 0, false
			case <-s.shutdown.Done():
				return 0, false
			}
		}
	case "echo":
		return 0, write(ss.out(strings.Join(command[1:], " ") + "\n"))
	case "env":
		var b strings.Builder
		fmt.Fprintf(&b, "USER=%s\nGROUPS=%s\n", ss.id.user, strings.Join(ss.id.groups, ","))
		keys := make([]string, 0, len(ss.id.extra))
		for k := range ss.id.extra {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "EXTRA_%s=%s\n", k, strings.Join(ss.id.extra[k], ","))
		}
		return 0, write(ss.out(b.String()))
	case "exit":
		n := 0
		if len(command) > 1 {
			v, err := strconv.Atoi(command[1])
			if err != nil {
				return 2, write(ss.errOut(fmt.Sprintf("exit: %s: numeric argument required\n", command[1])))
			}
			n = v & 0xff
		}
		return n, true
	default:
		return 127, write(ss.errOut(fmt.Sprintf("%s: command not found\n", command[0])))
	}
}
