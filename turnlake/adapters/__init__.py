"""Adapters of agent frameworks to a turnlake server. Each module needs its framework:
``pip install 'turnlake[langchain]'``, ``'turnlake[llamaindex]'`` or
``'turnlake[openai-agents]'``."""
