"""The admin client: ``Admin`` / ``AdminClient`` (``admin``), its ACL methods (``admin_acls``) and
its group methods (``admin_groups``). Imports ``client.common`` only, never the producer or consumer.
"""
