/* proto.h: the EMP wire format (version 2), frame types, flags and protocol tunables. */
#ifndef EMP_PROTO_H
#define EMP_PROTO_H

#include <stdint.h>

#define EMP_PROTO_VERSION     2
#define EMP_PROTO_VERSION_AUTH 10   /* version 2 with a tag after every frame (option auth) */
#define EMP_AUTH_TAG_LEN      8
#define EMP_ETHERTYPE_DEFAULT 0x88B5
#define EMP_ETH_HLEN          14

/*
 * Every EMP frame: Ethernet header (dst MAC, src MAC, EtherType), then the
 * common header, then the type's own header, then payload. All multi-byte
 * fields are big-endian on the wire. Version 2: 40 bytes of header in a DATA
 * frame (1460 payload bytes in a 1500-byte frame; version 1 had 48).
 *
 *  off len  common header (26 bytes)
 *    0  4   csum      CRC32C of bytes 4..end of frame (EMP_F_CSUM), else 0
 *    4  2   vtf       version (bits 15..12, EMP_PROTO_VERSION), type (bits
 *                     11..9, EMP_T_*), flags (bits 8..0, EMP_F_*)
 *    6  2   dst_ep    destination endpoint (the BPF filter matches this)
 *    8  2   src_ep    source endpoint
 *   10  4   dst_inc   incarnation the sender believes the receiver has
 *   14  4   src_inc   sender's incarnation (chosen at endpoint open)
 *   18  2   session   sender's session with this receiver (bumped on reset)
 *   20  2   credits   sender's free posted receives (flow control, saturating)
 *   22  4   msg_id    message id (per sender->receiver session, from 1)
 *
 *  DATA (14 bytes): the message header travels in every frame, so that any
 *  frame of a message can be matched even when the first one was lost.
 *   26  3   frame     frame index within the message (< EMP_MAX_FRAMES)
 *   29  4   msg_len   total message length in bytes
 *   33  4   tag       user tag
 *   37  2   frag      sender's payload bytes per frame (offset = frame*frag);
 *                     this frame's payload length follows from frame, frag
 *                     and msg_len (frag bytes, the last frame the rest)
 *   39  1   prev      msg_id minus the id of the previous message with the same
 *                     tag that was still unacknowledged when this one started
 *                     (0: none; EMP_PREV_FAR: that far back or farther): the
 *                     receiver matches this message only after that one, so a
 *                     tag never overtakes itself while other tags may. A
 *                     message farther back than the receiver's match window
 *                     (EMP_MATCH_BITS < EMP_PREV_FAR) is matched already
 *                     whenever this frame is inside that window.
 *
 *  with EMP_F_PIGGY, 12 more bytes follow the DATA header (before the payload):
 *  the completion ack of a message (short of bulk) from the receiver of this frame,
 *  riding along instead of a frame of its own (a ping-pong reply carries it):
 *   40  4   ack_msg   the message completed (its sender's id)
 *   44  4   ack_nfr   its frames (all received)
 *   48  2   ack_ses   the session that message came in
 *   50  2   rsvd
 *
 *  ACK / NACK (16 bytes): state of one message at the receiver
 *   26  4   cum       frames [0,cum) received
 *   30  4   nframes   frames in the message
 *   34  8   sack      bit i set: frame cum+i received (i < 64)
 *
 *  HELLO / HELLO_ACK (8 bytes): session setup, MTU exchange
 *   26  4   mtu       sender's device MTU
 *   30  4   nonce     HELLO: new per session, never repeated by the sender's
 *                     life, so that a session number reused toward a peer
 *                     that forgot us (reclaimed) still opens a new session;
 *                     HELLO_ACK: the HELLO's nonce (0: sent by an older engine)
 *
 *  STALE (4 bytes): "your frame named an incarnation I no longer have";
 *   the common header carries the current incarnation in src_inc.
 *   26  4   named     the incarnation the refused frame named (its dst_inc):
 *                     the receiver acts only if that is the one it believes
 *                     in, so a STALE replayed from another life changes nothing
 *
 *  PROBE (no body): "are you still dst_inc?". A HELLO from an incarnation
 *   other than the one we know may be a replay of a dead life; before giving
 *   up the known one we ask it (TCP's challenge ACK, RFC 5961). The known
 *   incarnation, if alive, ignores the probe; its successor answers STALE,
 *   and resends its own HELLO, which is then accepted.
 *
 *  BYE (no body): "this life is over" (its endpoint closes), sent once, not
 *   retransmitted, in the sender's session toward the receiver (session,
 *   src_inc and, with auth, the key as DATA). The receiver may then give the
 *   peer's slot to another as soon as nothing is held, queued or in flight
 *   toward it, instead of after EMP_PEER_IDLE_NS of quiet (without it a full
 *   table takes at most max_peers newcomers per EMP_PEER_IDLE_NS). A BYE
 *   that does not match the session is dropped; a lost one leaves the quiet
 *   rule.
 *
 *  BYE with EMP_F_DONE (12 bytes): "this life is over; of the messages you
 *   sent me, these completed". Sent at the close before the plain BYE, once,
 *   in the receiver's session toward the sender (session, dst_inc and, with
 *   auth, the key as ACK), to every peer whose session toward us we know. A
 *   final ack that was lost can no longer be answered once the endpoint is
 *   gone (nobody keeps its state, as TCP's TIME_WAIT does in the kernel): its
 *   sender learns here that the message arrived, and that the rest never
 *   will, at once instead of after its retries (-ETIMEDOUT).
 *   26  4   next      every message of that session below next completed here
 *   30  8   done      bit i: message next+i completed here (i < 64)
 *   Completed means matched, received whole and not given up (expire.c):
 *   the sender completes those sends with their length and fails the rest
 *   with ECONNRESET.
 *
 *  AUTHENTICATED FRAMES (option auth on; auth.c). The version field says
 *  EMP_PROTO_VERSION_AUTH (10) instead of 2; the frame is the same, followed
 *  by an 8-byte tag right after the type's body and payload (at offset
 *  26 + body length of the EMP header; Ethernet padding may follow):
 *    tag = SipHash-2-4(key, Ethernet header .. last payload byte), big-endian
 *  (the CRC, with checksum on, is computed first and covered by the tag).
 *  DATA payload per frame shrinks by 8 bytes (1452 at MTU 1500). Keys, all
 *  derived from the cluster secret K (option auth_key):
 *    HELLO  K_hello = KDF(K, "EMP-hello"): covers every field of the HELLO
 *    BYE    as DATA: the sender's session key
 *    STALE  K_stale, PROBE K_probe (likewise): sent with no session (a new
 *           life answering for a dead one); their effect is bounded by the
 *           incarnation checks (a STALE acts only when it names the life we
 *           believe in and is addressed to our current one)
 *    DATA (initiator I -> responder R), ACK and HELLO_ACK (R -> I) of I's
 *           session: KDF(K, "EMP-sess" | MAC_I | MAC_R | ep_I | ep_R | inc_I |
 *           inc_R | nonce_I | nonce_R | session), nonce_I from I's HELLO,
 *           nonce_R chosen by R when it accepts that HELLO and sent in its
 *           HELLO_ACK's msg_id field (0 without auth). I accepts a HELLO_ACK
 *           only if it echoes nonce_I and verifies under that key.
 *    KDF(k, m) = SipHash(k, 0x01 | m) || SipHash(k, 0x02 | m)
 *  With auth, a life's HELLO nonces count up (never repeat, never go back):
 *  a HELLO of the life we know whose nonce is not above the current
 *  session's is an old one replayed and is dropped (stale). A receiver with
 *  auth on drops a version-2 (untagged) frame as an auth failure; one with
 *  auth off drops a version-10 frame as a version mismatch: mixing the two
 *  fails with counted drops, never a half-working session.
 */

#define EMP_HDR_LEN        26
#define EMP_DATA_HDR_LEN   14
#define EMP_ACK_HDR_LEN    16
#define EMP_HELLO_HDR_LEN   8
#define EMP_BYE_DONE_LEN   12
#define EMP_STALE_HDR_LEN   4
#define EMP_PIGGY_LEN      12
#define EMP_DATA_OVERHEAD  (EMP_HDR_LEN + EMP_DATA_HDR_LEN)   /* beyond Ethernet: 40 */
#define EMP_FRAME_MAX      (EMP_ETH_HLEN + 65535)
#define EMP_MIN_MTU        112    /* the smallest device MTU EMP runs on */
#define EMP_MAX_FRAMES     (1u << 24)   /* frames per message (24-bit index) */
#define EMP_PREV_FAR       255u

/* common header fields: offsets from its start */
#define EMP_C_CSUM         0
#define EMP_C_VTF          4
#define EMP_C_DST_EP       6
#define EMP_C_SRC_EP       8
#define EMP_C_DST_INC     10
#define EMP_C_SRC_INC     14
#define EMP_C_SESSION     18
#define EMP_C_CREDITS     20
#define EMP_C_MSG_ID      22
/* DATA header fields: offsets from its start (EMP_HDR_LEN into the common header) */
#define EMP_D_FRAME        0
#define EMP_D_MSG_LEN      3
#define EMP_D_TAG          7
#define EMP_D_FRAG        11
#define EMP_D_PREV        13

/* the vtf word: version, type, flags */
#define EMP_VTF(ver, type, flags) \
	((uint16_t)(((unsigned)(ver) & 15u) << 12 | ((unsigned)(type) & 7u) << 9 | ((unsigned)(flags) & 0x1ffu)))
#define EMP_VTF_VERSION(v) ((unsigned)(v) >> 12)
#define EMP_VTF_TYPE(v)    (((unsigned)(v) >> 9) & 7u)
#define EMP_VTF_FLAGS(v)   ((unsigned)(v) & 0x1ffu)

/* byte offsets inside the frame (Ethernet header included), for BPF */
#define EMP_OFF_ETHERTYPE  12
#define EMP_OFF_DST_EP     (EMP_ETH_HLEN + EMP_C_DST_EP)

enum emp_frame_type {
	EMP_T_DATA      = 1,
	EMP_T_ACK       = 2,
	EMP_T_HELLO     = 3,
	EMP_T_HELLO_ACK = 4,
	EMP_T_STALE     = 5,
	EMP_T_PROBE     = 6,
	EMP_T_BYE       = 7,
};

enum emp_frame_flags {
	EMP_F_CSUM   = 1u << 0,  /* csum field is valid */
	EMP_F_ACKREQ = 1u << 1,  /* DATA: sender asks for an immediate ack */
	EMP_F_NACK   = 1u << 2,  /* ACK: a gap was seen; retransmit what is missing */
	EMP_F_NORECV = 1u << 3,  /* ACK: frame dropped, no receive posted (credits follow) */
	EMP_F_LAST   = 1u << 4,  /* DATA: last frame of the message */
	EMP_F_STUCK  = 1u << 5,  /* ACK: msg_id is the next message I can match;
				  * frames of later messages were dropped: resend them */
	EMP_F_CHAIN  = 1u << 6,  /* ACK: msg_id must come first; its later messages with
				  * the same tag were dropped: resend it and them */
	EMP_F_PIGGY  = 1u << 8,  /* DATA: a completion ack follows the DATA header */
	EMP_F_DUP    = 1u << 7,  /* ACK: answers a frame I already had: the sender's
				  * retransmission was spurious (its timer too short) */
	EMP_F_DONE   = 1u << 4,  /* BYE: in the receiver's session, what completed follows */
};

/* Protocol tunables (defaults; most are run-time options in emp.conf). */
#define EMP_SACK_BITS          64     /* receiver window per message, frames */
#define EMP_DEF_ACK_EVERY      3      /* thesis: ack a collection of 3 frames */
#define EMP_DEF_RTO_NS         1000000ull   /* first retransmit timeout: 1 ms */
#define EMP_SPURIOUS_QUIET_NS  1000000000ull /* a raised RTO floor decays after 1 s without spurious retransmits */
#define EMP_DEF_RTO_MAX_NS     200000000ull /* backoff cap: 200 ms */
#define EMP_DEF_RETRIES        24     /* return-to-sender after this many (about 4 s) */
#define EMP_DEF_ACK_DELAY_NS   50000ull     /* delayed ack for a partial collection */
#define EMP_DEV_DROPS_NS       100000000ull /* the device's drop count asked at most every 100 ms */
#define EMP_DEF_WINDOW         64     /* frames in flight per message */
#define EMP_DEF_PEER_WINDOW    512    /* frames in flight per receiver */
#define EMP_DEF_PEER_MSGS      64     /* messages in flight per receiver (<= EMP_MATCH_BITS) */
#define EMP_MATCH_BITS         64     /* receiver's window of message ids beyond the first unmatched */
/* one-frame messages (control, FIN, credit returns, small requests) keep a
 * lane of their own: multi-frame messages use at most peer_msgs - 8 message
 * slots, and a one-frame message may start ahead of queued bigger ones of
 * other tags (its own tag keeps its order) */
#define EMP_SMALL_RESERVE_MSGS    8
#define EMP_SMALL_LOOKAHEAD      64   /* queued messages looked past a blocked one */
#define EMP_MAX_TAG_ANY        0xffffffffu
/* a receive lends the frames of messages of this many bytes or more only
 * (lent.c): reading a lent frame takes the engine's lock, which a busy
 * multi-threaded program's threads want for driving; a short message's
 * copy is cheap */
#define EMP_LEND_MIN_BYTES       16384u

#endif
