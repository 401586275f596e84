"""The example support agent (``demo.agent``) and the end-to-end demo scenario (``demo.scenario``)."""
