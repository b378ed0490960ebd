"""backchannel-owner: agents notify their owner; the owner's replies reach the session mid-turn.

Kept empty on purpose: the inbox hook (`backchannel_owner.hook`) imports this
package on every tool call and must not pay for backchannel's imports. The
hook implementations live in `backchannel_owner.plugin`, the Python API in
`backchannel_owner.api`.
"""
