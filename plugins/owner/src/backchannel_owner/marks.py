"""A deterministic emoji per session, so the owner tells sessions apart at a glance.

The slot starts at FNV-1a-32(session id) mod the palette size; slots held by
another session seen in the last 24 hours are skipped; when every slot is
held, the least recently seen session's slot is reused. A session keeps the
slot it was given while it stays in use.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["PALETTE", "WINDOW", "choose_slot", "fnv1a_32"]

#: clearly different animals and objects, no two alike in colour and shape
PALETTE = (
    "🦊",  # fox, orange
    "🐸",  # frog, green
    "🐙",  # octopus, pink
    "🦉",  # owl, brown
    "🐝",  # bee, yellow-black
    "🐳",  # whale, blue
    "🦀",  # crab, red
    "🐧",  # penguin, black-white
    "🦒",  # giraffe, patterned
    "🐘",  # elephant, grey
    "🦜",  # parrot, multicoloured
    "🦩",  # flamingo, pink bird
    "🐞",  # ladybird, red-dotted
    "🐍",  # snake, green coil
    "🦄",  # unicorn, white-rainbow
    "🐼",  # panda, black-white face
    "🦁",  # lion, golden mane
    "🐷",  # pig, pink face
    "🐰",  # rabbit, white
    "🦇",  # bat, dark
    "🦓",  # zebra, stripes
    "🐢",  # turtle, shell
    "🦋",  # butterfly, blue wings
    "🐌",  # snail, spiral
    "🍄",  # mushroom, red cap
    "🌵",  # cactus
    "🌻",  # sunflower
    "🍋",  # lemon
    "🍇",  # grapes, purple
    "🥕",  # carrot
    "🚀",  # rocket
    "⚓",  # anchor
    "🔔",  # bell, gold
    "🎲",  # die, white cube
    "🎈",  # balloon, red
    "💎",  # gem, cyan
    "🔑",  # key
    "⏰",  # alarm clock
    "🧲",  # magnet
    "🎸",  # guitar
)

#: a session seen within this many seconds holds its slot against others
WINDOW = 24 * 3600.0


def fnv1a_32(text: str) -> int:
    """Return the 32-bit FNV-1a hash of `text` (UTF-8)."""
    value = 0x811C9DC5
    for byte in text.encode("utf-8"):
        value ^= byte
        value = (value * 0x01000193) & 0xFFFFFFFF
    return value


def choose_slot(
    session_id: str,
    others: Mapping[str, tuple[int, float]],
    now: float,
    palette_size: int = len(PALETTE),
) -> int:
    """Return the palette slot for `session_id`.

    `others` maps every other known session to (slot, last seen). Never fails:
    with every slot held, the least recently seen session's slot is reused.
    """
    held = {
        slot: seen
        for other, (slot, seen) in others.items()
        if other != session_id and now - seen < WINDOW
    }
    start = fnv1a_32(session_id) % palette_size
    for step in range(palette_size):
        slot = (start + step) % palette_size
        if slot not in held:
            return slot
    return min(held, key=lambda slot: (held[slot], slot))
