"""The admin client: ``Admin`` / ``AdminClient`` (``admin``) and its ACL methods (``admin_acls``).
Imports ``client.common`` only, never the producer or consumer.
"""
