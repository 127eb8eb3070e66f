"""The engine's exception tree. The gateway maps these to HTTP in one place."""


class EngineError(Exception):
    """Base of every error the engine package raises on purpose."""


class InvalidRequestError(EngineError, ValueError):
    """A request or its parameters are invalid; nothing was scheduled.

    ``param`` names the offending field when there is one.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class LoraError(InvalidRequestError):
    """A LoRA adapter that cannot be served on this model (the message names it and the module)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "lora")


class ModelLoadError(EngineError):
    """A model could not be found, parsed or loaded."""


class EngineDeadError(EngineError):
    """The engine process died or stopped answering; in-flight work is lost."""
