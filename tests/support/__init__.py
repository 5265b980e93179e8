"""Helpers the tests share: agents, card fixtures, a Redis server, the demo services, sample tools."""
