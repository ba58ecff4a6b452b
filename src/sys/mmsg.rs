//! sendmmsg/recvmmsg with UDP GSO/GRO, and MSG_ZEROCOPY.
