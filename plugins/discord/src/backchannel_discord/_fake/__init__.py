"""FakeDiscord's parts, in layers: the data (`world`), the Gateway (`gateway`), the REST API (`rest`).

Public use goes through `backchannel_discord.testing.FakeDiscord`.
"""
