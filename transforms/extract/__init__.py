"""The extract step: the main text of HTML records (issue 45). ``extract`` is the pure core
(``transforms.extract.core``), ``ExtractConfig`` the config section, ``ExtractStep`` the step."""
from transforms.extract.config import EXTRACTORS, ExtractConfig
from transforms.extract.core import NO_MAIN_TEXT, TOO_LARGE, TOO_SHORT, Extracted, extract

__all__ = ["EXTRACTORS", "ExtractConfig", "Extracted", "extract", "NO_MAIN_TEXT", "TOO_SHORT", "TOO_LARGE"]
