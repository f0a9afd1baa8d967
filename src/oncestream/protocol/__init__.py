"""protocol"""

from oncestream.protocol.kio_loading import load_kio

# Before any protocol module imports kio: keeps hypothesis out of start-up (see kio_loading).
load_kio()
